use std::net::SocketAddr;

use clap::{CommandFactory, FromArgMatches, Parser};

use super::*;

/// A service's settings, as the binaries declare theirs.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Demo {
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    run_timeout_secs: u64,
    #[arg(long)]
    keep_run_dirs: bool,
    #[arg(long, value_delimiter = ',')]
    workspace_roots: Vec<PathBuf>,
    #[arg(long)]
    database_url: Option<String>,
    #[arg(long)]
    admin_key_file: Option<PathBuf>,
    #[command(flatten)]
    config: ConfigArgs,
}

fn command() -> Command {
    without_env(Demo::command())
}

fn args(extra: &[&str]) -> Vec<OsString> {
    std::iter::once("demo")
        .chain(extra.iter().copied())
        .map(OsString::from)
        .collect()
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(file.path(), text).expect("write");
    file
}

fn settings(loaded: &Loaded) -> Demo {
    Demo::from_arg_matches(&loaded.matches).expect("typed")
}

fn error(extra: &[&str]) -> String {
    load(&command(), args(extra))
        .expect_err("refused")
        .to_string()
}

#[test]
fn the_file_sets_what_flags_leave_unset() {
    let config = file(
        r#"
listen = "0.0.0.0:7000"
run-timeout-secs = 900
keep-run-dirs = true
workspace-roots = ["/srv/a", "/srv/b"]
database-url = "postgres://chorus@db/chorus"
"#,
    );
    let path = config.path().to_str().expect("utf-8");
    let loaded = load(
        &command(),
        args(&["--config", path, "--run-timeout-secs", "30"]),
    )
    .expect("loaded");
    let demo = settings(&loaded);
    assert_eq!(
        demo.listen,
        "0.0.0.0:7000".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(demo.run_timeout_secs, 30, "a flag wins over the file");
    assert!(demo.keep_run_dirs);
    assert_eq!(
        demo.workspace_roots,
        vec![PathBuf::from("/srv/a"), PathBuf::from("/srv/b")]
    );
    assert_eq!(
        demo.database_url.as_deref(),
        Some("postgres://chorus@db/chorus")
    );
    assert_eq!(demo.admin_key_file, None);
    let cmd = command();
    assert_eq!(loaded.source(&cmd, "listen"), Some(Source::File));
    assert_eq!(loaded.source(&cmd, "run_timeout_secs"), Some(Source::Flag));
    assert_eq!(loaded.source(&cmd, "admin_key_file"), None);
}

#[test]
fn without_a_file_the_defaults_hold() {
    let loaded = load(&command(), args(&[])).expect("loaded");
    let demo = settings(&loaded);
    assert_eq!(demo.run_timeout_secs, 600);
    assert_eq!(
        loaded.source(&command(), "run_timeout_secs"),
        Some(Source::Default)
    );
    assert_eq!(loaded.file, None);
}

#[test]
fn an_unknown_key_is_refused_naming_it_and_the_file() {
    let config = file("data_dir = \"/var/lib/chorus\"\n");
    let path = config.path().to_str().expect("utf-8");
    assert_eq!(
        error(&["--config", path]),
        format!(
            "configuration file {path}: unknown key `data_dir` (each key is the long name of a flag: see --help)"
        )
    );
    let config = file("run_timeout_secs = 5\n");
    let path = config.path().to_str().expect("utf-8");
    assert_eq!(
        error(&["--config", path]),
        format!(
            "configuration file {path}: unknown key `run_timeout_secs`; did you mean `run-timeout-secs`? (each key is the long name of a flag: see --help)"
        )
    );
    let config = file("config = \"other.toml\"\n");
    let path = config.path().to_str().expect("utf-8");
    assert!(error(&["--config", path]).contains("unknown key `config`"));
}

#[test]
fn a_bad_value_is_refused_naming_its_key() {
    for (text, expected) in [
        (
            "run-timeout-secs = \"soon\"\n",
            "`run-timeout-secs`: invalid value 'soon' for '--run-timeout-secs <RUN_TIMEOUT_SECS>': invalid digit found in string",
        ),
        (
            "run-timeout-secs = 0\n",
            "`run-timeout-secs`: invalid value '0' for '--run-timeout-secs <RUN_TIMEOUT_SECS>': 0 is not in 1..18446744073709551615",
        ),
        (
            "keep-run-dirs = \"yes\"\n",
            "`keep-run-dirs` is true or false, not string",
        ),
        (
            "listen = [\"a\", \"b\"]\n",
            "`listen` takes one value, not a list",
        ),
        (
            "listen = { host = \"a\" }\n",
            "`listen` takes a string, a number or a boolean, not table",
        ),
    ] {
        let config = file(text);
        let path = config.path().to_str().expect("utf-8");
        assert_eq!(
            error(&["--config", path]),
            format!("configuration file {path}: {expected}"),
            "{text}"
        );
    }
    let config = file("listen = \n");
    let path = config.path().to_str().expect("utf-8");
    assert!(
        error(&["--config", path]).starts_with(&format!("configuration file {path}: is not TOML")),
        "{}",
        error(&["--config", path])
    );
    assert!(
        error(&["--config", "/nonexistent/chorus.toml"])
            .starts_with("configuration file /nonexistent/chorus.toml: cannot be read"),
    );
}

#[test]
fn the_rendered_settings_are_a_config_file_that_gives_the_same_settings() {
    let config = file("listen = \"0.0.0.0:7000\"\nworkspace-roots = [\"/srv/a\", \"/srv/b\"]\n");
    let path = config.path().to_str().expect("utf-8");
    let loaded = load(
        &command(),
        args(&[
            "--config",
            path,
            "--keep-run-dirs",
            "--database-url",
            "postgres://chorus:s3cret@db/chorus?sslmode=require&password=x",
        ]),
    )
    .expect("loaded");
    let rendered = loaded.render(
        &command(),
        &Render {
            derived: vec![(
                "admin-key-file",
                ".chorus/admin.key".to_owned(),
                "<data-dir>/admin.key",
            )],
            urls: vec!["database-url"],
            notes: vec!["the secrets key: from CHORUS_SECRETS_KEY (hidden)".to_owned()],
            ..Render::default()
        },
    );
    assert_eq!(
        rendered,
        format!(
            "# demo: effective settings (defaults < {path} < environment < flags)
listen = \"0.0.0.0:7000\" # file
run-timeout-secs = 600 # default
keep-run-dirs = true # --keep-run-dirs
workspace-roots = [\"/srv/a\", \"/srv/b\"] # file
database-url = \"postgres://chorus:<hidden>@db/chorus?sslmode=require&password=<hidden>\" # --database-url
admin-key-file = \".chorus/admin.key\" # default: <data-dir>/admin.key
# the secrets key: from CHORUS_SECRETS_KEY (hidden)
"
        )
    );
    let again = file(&rendered);
    let reloaded = load(
        &command(),
        args(&["--config", again.path().to_str().expect("utf-8")]),
    )
    .expect("the rendered settings load");
    let (before, after) = (settings(&loaded), settings(&reloaded));
    assert_eq!(after.listen, before.listen);
    assert_eq!(after.run_timeout_secs, before.run_timeout_secs);
    assert_eq!(after.keep_run_dirs, before.keep_run_dirs);
    assert_eq!(after.workspace_roots, before.workspace_roots);
    assert_eq!(
        after.admin_key_file,
        Some(PathBuf::from(".chorus/admin.key"))
    );
}

#[test]
fn passwords_in_urls_are_hidden() {
    assert_eq!(
        hide_password("postgres://u:p@h/db"),
        "postgres://u:<hidden>@h/db"
    );
    assert_eq!(hide_password("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(
        hide_password("postgresql://h/db?user=u&password=p"),
        "postgresql://h/db?user=u&password=<hidden>"
    );
    assert_eq!(hide_password(".chorus/chorus.db"), ".chorus/chorus.db");
}
