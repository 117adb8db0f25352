use super::*;

fn grant() -> RunGrant {
    RunGrant {
        run_id: "run-1".into(),
        task_id: "task-1".into(),
        agent: "writer".into(),
        tools: vec!["file.read".into(), "help".into()],
        root: PathBuf::from("/srv/workspace"),
    }
}

#[test]
fn a_minted_token_verifies_and_carries_the_grant() {
    let signer = RunTokenSigner::generate();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let back = signer.verifier().verify(&token).expect("verifies");
    assert_eq!(back, grant());
    assert!(back.allows("file.read") && !back.allows("file.write"));
}

#[test]
fn a_token_from_another_key_is_refused() {
    let token = RunTokenSigner::generate().mint(&grant(), Duration::from_secs(60));
    let err = RunTokenSigner::generate()
        .verifier()
        .verify(&token)
        .expect_err("foreign key");
    assert_eq!(err, TokenError::BadSignature);
}

#[test]
fn an_expired_token_is_refused() {
    let signer = RunTokenSigner::generate();
    let claims = Claims {
        grant: grant(),
        iss: ISSUER.into(),
        aud: AUDIENCE.into(),
        iat: 1,
        exp: unix_now() - 1,
    };
    let token = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &signer.encoding)
        .expect("encodes");
    assert_eq!(signer.verifier().verify(&token), Err(TokenError::Expired));
}

#[test]
fn a_tampered_token_is_refused() {
    let signer = RunTokenSigner::generate();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    // Swap in claims that grant more, keeping the original signature.
    let mut wider = grant();
    wider.tools.push("bash".into());
    let claims = Claims {
        grant: wider,
        iss: ISSUER.into(),
        aud: AUDIENCE.into(),
        iat: 1,
        exp: unix_now() + 60,
    };
    let other = jsonwebtoken::encode(
        &Header::new(Algorithm::EdDSA),
        &claims,
        &RunTokenSigner::generate().encoding,
    )
    .expect("encodes");
    parts[1] = other.split('.').nth(1).expect("payload").to_owned();
    assert_eq!(
        signer.verifier().verify(&parts.join(".")),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn garbage_and_empty_tokens_are_refused_precisely() {
    let verifier = RunTokenSigner::generate().verifier();
    assert_eq!(verifier.verify("  "), Err(TokenError::Missing));
    assert!(matches!(
        verifier.verify("not-a-jwt"),
        Err(TokenError::Malformed(_))
    ));
}

#[test]
fn an_unsigned_token_is_refused() {
    let signer = RunTokenSigner::generate();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let mut parts = token.split('.');
    // alg "none" header with the real payload and no signature.
    let unsigned = format!(
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.",
        parts.nth(1).expect("payload")
    );
    assert!(signer.verifier().verify(&unsigned).is_err());
}

#[test]
fn key_files_are_created_once_and_reloaded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = load_or_create_signer(dir.path()).expect("creates");
    let mode = std::fs::metadata(dir.path().join(PRIVATE_KEY_FILE))
        .expect("key file")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let again = load_or_create_signer(dir.path()).expect("reloads");
    assert_eq!(first.public_pem(), again.public_pem());
    let token = again.mint(&grant(), Duration::from_secs(60));
    let verifier = load_verifier(&dir.path().join(PUBLIC_KEY_FILE)).expect("public key");
    assert_eq!(verifier.verify(&token).expect("verifies").run_id, "run-1");
}

#[test]
fn a_private_key_that_is_not_pem_is_a_clear_error() {
    let err = RunTokenSigner::from_private_pem("hello").expect_err("bad pem");
    assert!(err.to_string().contains("Ed25519 PKCS#8 PEM"), "{err}");
}
