use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};

use super::*;

/// The settings from `args` alone: no environment, no file unless named.
fn settings(args: &[&str]) -> OrchestratorSettings {
    let command = chorus_serve::config::without_env(OrchestratorSettings::command());
    let args = std::iter::once("chorus-orchestrator")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    let loaded = chorus_serve::config::load(&command, args).expect("loaded");
    OrchestratorSettings::from_arg_matches(&loaded.matches).expect("typed")
}

#[test]
fn everything_is_kept_in_the_data_directory_by_default() {
    let s = settings(&["--data-dir", "/var/lib/chorus"]);
    assert_eq!(s.database_url(), "/var/lib/chorus/chorus.db");
    assert_eq!(
        s.run_token_keys(),
        PathBuf::from("/var/lib/chorus/run-token-keys.json")
    );
    assert_eq!(s.runs_dir(), PathBuf::from("/var/lib/chorus/runs"));
    assert_eq!(
        s.admin_key_file(),
        PathBuf::from("/var/lib/chorus/admin.key")
    );
    assert_eq!(
        s.secrets_key(None),
        KeySource::File {
            path: PathBuf::from("/var/lib/chorus/secrets.key"),
            create: true
        }
    );
    assert!(s.keeps_in_data_dir(&s.secrets_key(None)));
}

#[test]
fn every_written_thing_can_be_placed_apart_from_the_data_directory() {
    let s = settings(&[
        "--data-dir",
        "/opt/chorus",
        "--database-url",
        "postgres://chorus@db/chorus",
        "--run-token-keys",
        "/run/secrets/run-token-keys.json",
        "--runs-dir",
        "/var/run/chorus/runs",
        "--admin-key-file",
        "/var/run/chorus/admin.key",
        "--secrets-key-file",
        "/run/secrets/secrets.key",
    ]);
    let secrets = s.secrets_key(Some("ignored: the file wins".to_owned()));
    assert_eq!(secrets.file(), Some(Path::new("/run/secrets/secrets.key")));
    assert!(!s.keeps_in_data_dir(&secrets));
    let key = settings(&[
        "--data-dir",
        "/opt/chorus",
        "--database-url",
        "postgres://db/c",
        "--run-token-keys",
        "/k",
        "--runs-dir",
        "/r",
        "--admin-key-file",
        "/a",
    ])
    .secrets_key(Some("a2V5".to_owned()));
    assert!(matches!(key, KeySource::Value { .. }));

    let signer = chorus_run_token::RunTokenSigner::generate();
    let config = s
        .config(signer, None, secrets, Path::new("/srv/work"))
        .expect("config");
    assert_eq!(
        config.runner.runs_dir,
        PathBuf::from("/var/run/chorus/runs")
    );
    assert_eq!(
        config.admin_key_file,
        Some(PathBuf::from("/var/run/chorus/admin.key"))
    );
    // None of them can be a workspace, nor the data directory.
    for own in [
        "/opt/chorus",
        "/var/run/chorus/runs",
        "/run/secrets/run-token-keys.json",
        "/var/run/chorus/admin.key",
    ] {
        assert!(
            config
                .workspace_roots
                .protected
                .contains(&PathBuf::from(own)),
            "{own} is protected: {:?}",
            config.workspace_roots.protected
        );
    }
}

#[test]
fn the_serving_settings_reach_the_config() {
    let s = settings(&[
        "--request-timeout-secs",
        "5",
        "--max-concurrent-requests",
        "8",
        "--max-concurrent-streams",
        "4",
        "--drain-secs",
        "7",
        "--keepalive-secs",
        "0",
    ]);
    let config = s
        .config(
            chorus_run_token::RunTokenSigner::generate(),
            None,
            s.secrets_key(None),
            Path::new("/srv/work"),
        )
        .expect("config");
    assert_eq!(config.serve.request_timeout, Duration::from_secs(5));
    assert_eq!(config.serve.capacity.unary, 8);
    assert_eq!(config.serve.capacity.streams, 4);
    assert_eq!(config.serve.drain, Duration::from_secs(7));
    assert_eq!(config.serve.keepalive, None);
}

#[test]
fn the_two_listeners_must_differ() {
    let s = settings(&[
        "--listen",
        "127.0.0.1:7000",
        "--tool-exec-listen",
        "127.0.0.1:7000",
    ]);
    assert_eq!(
        s.validate(),
        Err("--listen and --tool-exec-listen are both 127.0.0.1:7000: give the embedded tool-exec another address, or --no-embedded-tool-exec".to_owned())
    );
    let s = settings(&[
        "--listen",
        "127.0.0.1:7000",
        "--tool-exec-listen",
        "127.0.0.1:7000",
        "--no-embedded-tool-exec",
    ]);
    assert_eq!(s.validate(), Ok(()));
}

#[test]
fn the_printed_settings_hide_the_database_password_and_say_where_the_secrets_key_is() {
    let s = settings(&["--database-url", "postgres://chorus:hunter2@db/chorus"]);
    let command = chorus_serve::config::without_env(OrchestratorSettings::command());
    let loaded = chorus_serve::config::load(
        &command,
        [
            "chorus-orchestrator",
            "--database-url",
            "postgres://chorus:hunter2@db/chorus",
        ]
        .into_iter()
        .map(OsString::from)
        .collect(),
    )
    .expect("loaded");
    let printed = loaded.render(&command, &s.render(Path::new("/srv/work"), true));
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed
            .contains("database-url = \"postgres://chorus:<hidden>@db/chorus\" # --database-url"),
        "{printed}"
    );
    assert!(
        printed.contains("runs-dir = \".chorus/runs\" # default: <data-dir>/runs"),
        "{printed}"
    );
    assert!(
        printed.contains("workspace-roots = [\"/srv/work\"] # default: the directory it starts in"),
        "{printed}"
    );
    assert!(
        printed.contains("# the secrets key: CHORUS_SECRETS_KEY (hidden)"),
        "{printed}"
    );
    assert!(printed.contains("drain-secs = 0 # default"), "{printed}");
}
