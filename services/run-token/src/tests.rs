use super::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

fn grant() -> RunGrant {
    RunGrant {
        run_id: "run-1".into(),
        task_id: "task-1".into(),
        agent: "writer".into(),
        tools: vec!["file.read".into(), "help".into()],
        root: PathBuf::from("/srv/workspace"),
        egress: Vec::new(),
        epoch: 0,
    }
}

/// Signs `claims` with `signer`'s current key, naming it in the header.
fn forge(signer: &RunTokenSigner, claims: &Claims) -> String {
    let key = EncodingKey::from_ed_pem(signer.current_private_pem().as_bytes()).expect("key");
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(signer.current_kid());
    jsonwebtoken::encode(&header, claims, &key).expect("encodes")
}

fn claims(grant: RunGrant, exp: u64) -> Claims {
    Claims {
        grant,
        iss: ISSUER.into(),
        aud: AUDIENCE.into(),
        iat: 1,
        exp,
    }
}

#[test]
fn a_minted_token_verifies_and_carries_the_grant_and_its_key() {
    let signer = RunTokenSigner::generate();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let back = signer.verifier().verify_token(&token).expect("verifies");
    assert_eq!(back.grant, grant());
    assert_eq!(back.kid, signer.current_kid());
    assert!(back.expires_at >= unix_now() + 59);
    assert!(back.grant.allows("file.read") && !back.grant.allows("file.write"));
}

#[test]
fn a_token_from_another_key_is_refused() {
    let token = RunTokenSigner::generate().mint(&grant(), Duration::from_secs(60));
    let err = RunTokenSigner::generate()
        .verifier()
        .verify(&token)
        .expect_err("foreign key");
    assert!(matches!(err, TokenError::UnknownKey(_)), "{err}");
}

#[test]
fn a_token_naming_a_known_key_but_signed_by_another_is_refused() {
    let signer = RunTokenSigner::generate();
    let other = RunTokenSigner::generate();
    let key = EncodingKey::from_ed_pem(other.current_private_pem().as_bytes()).expect("key");
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(signer.current_kid());
    let token =
        jsonwebtoken::encode(&header, &claims(grant(), unix_now() + 60), &key).expect("encodes");
    assert_eq!(
        signer.verifier().verify(&token),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn an_expired_token_is_refused() {
    let signer = RunTokenSigner::generate();
    let token = forge(&signer, &claims(grant(), unix_now() - 1));
    assert_eq!(signer.verifier().verify(&token), Err(TokenError::Expired));
}

#[test]
fn a_token_without_a_key_id_is_refused_with_what_to_do() {
    let signer = RunTokenSigner::generate();
    let key = EncodingKey::from_ed_pem(signer.current_private_pem().as_bytes()).expect("key");
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::EdDSA),
        &claims(grant(), unix_now() + 60),
        &key,
    )
    .expect("encodes");
    let err = signer.verifier().verify(&token).expect_err("no kid");
    assert!(err.to_string().contains("start the run again"), "{err}");
}

#[test]
fn a_tampered_token_is_refused() {
    let signer = RunTokenSigner::generate();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    // Swap in claims that grant more, keeping the original signature.
    let mut wider = grant();
    wider.tools.push("bash".into());
    let other = forge(&RunTokenSigner::generate(), &claims(wider, unix_now() + 60));
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
fn lifetimes_are_capped() {
    let signer = RunTokenSigner::generate();
    let token = signer.mint(&grant(), Duration::from_secs(100 * 365 * 24 * 3600));
    let back = signer.verifier().verify_token(&token).expect("verifies");
    assert!(back.expires_at <= unix_now() + MAX_TOKEN_TTL.as_secs());
}

#[test]
fn the_key_set_is_created_once_owner_only_and_reloaded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let first = load_or_create_signer(&data).expect("creates");
    let mode = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).expect("meta").permissions())
            & 0o777
    };
    assert_eq!(mode(&data.join(KEY_SET_FILE)), 0o600);
    assert_eq!(mode(&data), 0o700);
    let again = load_or_create_signer(&data).expect("reloads");
    assert_eq!(first.public_pem(), again.public_pem());
    assert_eq!(first.current_kid(), again.current_kid());
    let token = again.mint(&grant(), Duration::from_secs(60));
    let verifier = load_verifier(&data.join(PUBLIC_KEY_FILE)).expect("public key");
    assert_eq!(verifier.verify(&token).expect("verifies").run_id, "run-1");
}

#[test]
fn a_key_set_placed_apart_is_created_there_alone_and_rotates_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("secrets").join("keys.json");
    let first = load_or_create_signer_file(&file).expect("creates");
    let mode = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).expect("meta").permissions())
            & 0o777
    };
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&dir.path().join("secrets")), 0o700);
    let beside: Vec<_> = std::fs::read_dir(dir.path().join("secrets"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        beside,
        vec![std::ffi::OsString::from("keys.json")],
        "nothing written beside it"
    );
    let rotated = first.rotate().expect("rotates");
    let again = load_or_create_signer_file(&file).expect("reloads");
    assert_eq!(again.current_kid(), rotated.kid);
}

#[test]
fn an_older_single_key_file_is_adopted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = RunTokenSigner::generate();
    std::fs::write(dir.path().join("run-token.key"), old.current_private_pem()).expect("write");
    let signer = load_or_create_signer(dir.path()).expect("adopts");
    assert_eq!(signer.current_kid(), old.current_kid());
    assert!(!dir.path().join("run-token.key").exists());
}

#[test]
fn rotation_keeps_old_tokens_valid_and_signs_new_ones_with_the_new_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let signer = load_or_create_signer(dir.path()).expect("creates");
    let verifier = signer.verifier();
    let old_kid = signer.current_kid();
    let old = signer.mint(&grant(), Duration::from_secs(60));
    let new_key = signer.rotate().expect("rotates");
    assert_ne!(new_key.kid, old_kid);
    let new = signer.mint(&grant(), Duration::from_secs(60));
    // A verifier handed out before the rotation follows it.
    assert_eq!(verifier.verify_token(&old).expect("old").kid, old_kid);
    assert_eq!(verifier.verify_token(&new).expect("new").kid, new_key.kid);
    let published = signer.public_keys();
    assert_eq!(published.len(), 2);
    assert!(published[0].retired_ms.is_some() && published[1].retired_ms.is_none());
    // The rotation was saved: a restart signs with the new key, verifies both.
    let reloaded = load_or_create_signer(dir.path()).expect("reloads");
    assert_eq!(reloaded.current_kid(), new_key.kid);
    assert!(reloaded.verifier().verify(&old).is_ok());
    let file = load_verifier(&dir.path().join(PUBLIC_KEY_FILE)).expect("public keys");
    assert_eq!(file.kids().len(), 2);
}

#[test]
fn a_verifier_takes_only_keys_whose_id_is_their_own() {
    let a = RunTokenSigner::generate();
    let b = RunTokenSigner::generate();
    let verifier = RunTokenVerifier::from_public_pem(&a.public_pem()).expect("pem");
    let taken = verifier.replace(vec![
        (a.current_kid(), b.public_pem()),
        (b.current_kid(), b.public_pem()),
    ]);
    assert_eq!(taken, 1);
    assert_eq!(verifier.kids(), vec![b.current_kid()]);
}

#[test]
fn a_private_key_that_is_not_pem_is_a_clear_error() {
    let err = RunTokenSigner::from_private_pem("hello").expect_err("bad pem");
    assert!(err.to_string().contains("Ed25519 PKCS#8 PEM"), "{err}");
}

#[test]
fn the_egress_claim_travels_and_tokens_minted_before_it_still_verify() {
    let signer = RunTokenSigner::generate();
    let with = RunGrant {
        egress: vec!["github.com:443".into()],
        ..grant()
    };
    let token = signer.mint(&with, Duration::from_secs(60));
    assert_eq!(
        signer
            .verifier()
            .verify_token(&token)
            .expect("verifies")
            .grant,
        with
    );
    // A token of a run before the claim existed: no `egress` at all.
    #[derive(Serialize)]
    struct OldClaims {
        sub: String,
        task_id: String,
        agent: String,
        tools: Vec<String>,
        root: PathBuf,
        iss: String,
        aud: String,
        iat: u64,
        exp: u64,
    }
    let old = OldClaims {
        sub: "run-1".into(),
        task_id: "task-1".into(),
        agent: "writer".into(),
        tools: vec!["file.read".into(), "help".into()],
        root: PathBuf::from("/srv/workspace"),
        iss: ISSUER.into(),
        aud: AUDIENCE.into(),
        iat: 1,
        exp: unix_now() + 60,
    };
    let key = EncodingKey::from_ed_pem(signer.current_private_pem().as_bytes()).expect("key");
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(signer.current_kid());
    let token = jsonwebtoken::encode(&header, &old, &key).expect("encodes");
    let back = signer
        .verifier()
        .verify_token(&token)
        .expect("an old token verifies");
    assert_eq!(back.grant, grant());
    // An empty list is not written at all: such tokens look as before.
    let json = serde_json::to_string(&grant()).expect("json");
    assert!(!json.contains("egress"), "{json}");
}

#[test]
fn a_remembered_token_is_refused_once_its_keys_are_gone_or_it_has_expired() {
    let signer = RunTokenSigner::generate();
    let verifier = signer.verifier();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let first = verifier.verify_token(&token).expect("verifies");
    assert_eq!(
        verifier.verify_token(&token),
        Ok(first.clone()),
        "again, remembered"
    );
    // A clone shares what is remembered and the keys.
    let clone = verifier.clone();
    clone.replace(Vec::new());
    assert!(
        matches!(
            verifier.verify_token(&token),
            Err(TokenError::UnknownKey(_))
        ),
        "its key is gone: refused though it verified before"
    );
    // A remembered token past its expiry is refused.
    let signer = RunTokenSigner::generate();
    let verifier = signer.verifier();
    let token = signer.mint(&grant(), Duration::from_secs(60));
    let mut verified = verifier.verify_token(&token).expect("verifies");
    verified.expires_at = unix_now() - 1;
    verifier.remembered().insert(token.clone(), verified);
    assert_eq!(verifier.verify_token(&token), Err(TokenError::Expired));
    // A tampered token is not the remembered one.
    let mut tampered = token.clone();
    tampered.pop();
    assert!(verifier.verify_token(&tampered).is_err());
}
