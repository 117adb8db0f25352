//! The optional configuration file, under environment and flags.
//!
//! Each service has one typed settings struct, derived with clap: it names
//! every setting's flag, environment variable, default and parser once. The
//! file adds a layer under the environment: precedence is
//! defaults < file < environment < flags. A key of the file is the long name
//! of a flag (`data-dir = "/var/lib/chorus"`), and its value goes through the
//! same parser as the flag's, so a value means the same wherever it is given
//! (decision 0018).
//!
//! [`load`] parses the command line with the environment, reads the file named
//! by `--config` (or `CHORUS_CONFIG`), refuses keys that are no flag, and
//! parses again with the file's values for every setting that neither a flag
//! nor the environment gave. [`Loaded::render`] prints the effective values as
//! TOML, each with where it came from, secrets hidden (`--print-config`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};

/// Id of the `--config` argument (see [`ConfigArgs`]).
const CONFIG_ID: &str = "config";
/// Ids never read from the file.
const NOT_IN_FILE: [&str; 4] = [CONFIG_ID, "print_config", "help", "version"];

/// The flags of the configuration file itself; flatten into each service's settings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// TOML file of settings: each key is the long name of a flag
    /// (`data-dir = "/var/lib/chorus"`); environment variables and flags win
    /// over it.
    #[arg(long, env = "CHORUS_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective settings as TOML, with where each comes from and
    /// secrets hidden, and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The command line or the environment: clap's own message (and `--help`,
    /// `--version`), for [`clap::Error::exit`].
    #[error("{0}")]
    Args(#[from] clap::Error),
    /// The configuration file.
    #[error("configuration file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
}

impl ConfigError {
    fn file(path: &Path, message: impl Into<String>) -> Self {
        Self::File {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    /// The environment variable.
    Env(String),
    Flag,
}

/// The parsed settings, with where each came from.
#[derive(Debug)]
pub struct Loaded {
    pub matches: ArgMatches,
    /// The configuration file, when one was read.
    pub file: Option<PathBuf>,
    /// Ids of the settings the file gave.
    from_file: Vec<String>,
}

/// Parses `args` (the binary's name first) against `command`: flags, the
/// environment (clap reads it), the configuration file and the defaults.
///
/// # Errors
/// [`ConfigError::Args`] for the command line and the environment (and for
/// `--help`, `--version`); [`ConfigError::File`] for the file: unreadable, not
/// TOML, a key that is no flag, a value its flag's parser refuses.
pub fn load(command: &Command, args: Vec<OsString>) -> Result<Loaded, ConfigError> {
    let first = command.clone().try_get_matches_from(&args)?;
    let file = match first.try_get_one::<PathBuf>(CONFIG_ID) {
        Ok(Some(file)) if first.subcommand().is_none() => file.clone(),
        _ => {
            return Ok(Loaded {
                matches: first,
                file: None,
                from_file: Vec::new(),
            });
        }
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| ConfigError::file(&file, format!("cannot be read: {e}")))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::file(&file, format!("is not TOML: {e}")))?;

    let flags: HashMap<&str, &clap::Arg> = command
        .get_arguments()
        .filter(|a| !NOT_IN_FILE.contains(&a.get_id().as_str()) && !a.is_hide_set())
        .filter_map(|a| a.get_long().map(|long| (long, a)))
        .collect();
    let mut injected: Vec<OsString> = Vec::new();
    let mut from_file = Vec::new();
    for (key, value) in &table {
        let Some(arg) = flags.get(key.as_str()) else {
            return Err(ConfigError::file(&file, unknown_key(key, &flags)));
        };
        let id = arg.get_id().as_str();
        if matches!(
            first.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let values = file_values(key, value, arg.get_action())
            .map_err(|message| ConfigError::file(&file, message))?;
        injected.extend(values);
        from_file.push(id.to_owned());
    }
    if from_file.is_empty() {
        return Ok(Loaded {
            matches: first,
            file: Some(file),
            from_file,
        });
    }

    let mut layered = Vec::with_capacity(args.len() + injected.len());
    let mut args = args.into_iter();
    layered.extend(args.next());
    layered.extend(injected);
    layered.extend(args);
    let matches = command
        .clone()
        .try_get_matches_from(layered)
        .map_err(|e| file_error(&file, &e))?;
    Ok(Loaded {
        matches,
        file: Some(file),
        from_file,
    })
}

/// [`load`] on this process's arguments. When they cannot be used, prints
/// clap's answer (or `--help`, `--version`) or the file's error and exits:
/// status 2 for an error, 0 for help and version.
pub fn load_or_exit(command: &Command) -> Loaded {
    match load(command, std::env::args_os().collect()) {
        Ok(loaded) => loaded,
        Err(ConfigError::Args(error)) => error.exit(),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(2)
        }
    }
}

/// A file value as the flag's command-line words.
fn file_values(
    key: &str,
    value: &toml::Value,
    action: &ArgAction,
) -> Result<Vec<OsString>, String> {
    let flag = format!("--{key}");
    match (action, value) {
        (ArgAction::SetTrue, toml::Value::Boolean(on)) => {
            Ok(if *on { vec![flag.into()] } else { Vec::new() })
        }
        (ArgAction::SetTrue, other) => Err(format!(
            "`{key}` is true or false, not {}",
            other.type_str()
        )),
        (ArgAction::Append, toml::Value::Array(items)) => items
            .iter()
            .map(|item| scalar(key, item).map(|v| format!("{flag}={v}").into()))
            .collect(),
        (_, toml::Value::Array(_)) => Err(format!("`{key}` takes one value, not a list")),
        (_, value) => Ok(vec![format!("{flag}={}", scalar(key, value)?).into()]),
    }
}

fn scalar(key: &str, value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Datetime(d) => Ok(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => Err(format!(
            "`{key}` takes a string, a number or a boolean, not {}",
            value.type_str()
        )),
    }
}

fn unknown_key(key: &str, flags: &HashMap<&str, &clap::Arg>) -> String {
    let hint = [key.replace('_', "-"), key.to_lowercase().replace('_', "-")]
        .into_iter()
        .find(|k| k != key && flags.contains_key(k.as_str()))
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default();
    format!("unknown key `{key}`{hint} (each key is the long name of a flag: see --help)")
}

/// clap's refusal of a value the file gave, naming the key.
fn file_error(file: &Path, error: &clap::Error) -> ConfigError {
    let rendered = error.render().to_string();
    let first_line = rendered
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned();
    let key = match error.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => arg
            .split_whitespace()
            .next()
            .map(|flag| flag.trim_start_matches('-').to_owned()),
        _ => None,
    };
    match key {
        Some(key) => ConfigError::file(file, format!("`{key}`: {first_line}")),
        None => ConfigError::file(file, first_line),
    }
}

/// What [`Loaded::render`] shows beside the parsed values.
#[derive(Debug, Default)]
pub struct Render<'a> {
    /// Effective values of settings left unset (keyed by long flag name),
    /// with how they follow from others: `("database-url", ".chorus/chorus.db",
    /// "<data-dir>/chorus.db")`.
    pub derived: Vec<(&'a str, String, &'a str)>,
    /// Keys (long flag names) whose values are hidden.
    pub hidden: Vec<&'a str>,
    /// Keys (long flag names) whose values are URLs whose password is hidden.
    pub urls: Vec<&'a str>,
    /// Comment lines at the end (settings that are no flag: a secret taken
    /// from the environment).
    pub notes: Vec<String>,
}

impl Loaded {
    /// Where the value of `id` came from; None when it has none.
    pub fn source(&self, command: &Command, id: &str) -> Option<Source> {
        if self.from_file.iter().any(|f| f == id) {
            return Some(Source::File);
        }
        match self.matches.value_source(id)? {
            ValueSource::DefaultValue => Some(Source::Default),
            ValueSource::CommandLine => Some(Source::Flag),
            ValueSource::EnvVariable => Some(Source::Env(
                command
                    .get_arguments()
                    .find(|a| a.get_id() == id)
                    .and_then(|a| a.get_env())
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            )),
            _ => None,
        }
    }

    /// The effective settings as TOML: one line per flag, in the order of
    /// `--help`, each with where it came from. A file of these lines is a
    /// valid `--config` (hidden values aside).
    pub fn render(&self, command: &Command, options: &Render<'_>) -> String {
        let mut out = String::new();
        let file = self
            .file
            .as_ref()
            .map_or_else(|| "no file".to_owned(), |f| f.display().to_string());
        out.push_str(&format!(
            "# {}: effective settings (defaults < {file} < environment < flags)\n",
            command.get_name()
        ));
        let derived: BTreeMap<&str, (&String, &str)> = options
            .derived
            .iter()
            .map(|(key, value, how)| (*key, (value, *how)))
            .collect();
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            let Some(key) = arg.get_long() else { continue };
            if NOT_IN_FILE.contains(&id) || arg.is_hide_set() {
                continue;
            }
            let source = self.source(command, id);
            let value = self.value(arg, id);
            let line = match (value, source) {
                (Some(value), Some(source)) => {
                    let shown = if options.hidden.contains(&key) {
                        toml::Value::String("<hidden>".to_owned())
                    } else if options.urls.contains(&key) {
                        hide_url_password(value)
                    } else {
                        value
                    };
                    let from = match source {
                        Source::Default => "default".to_owned(),
                        Source::File => "file".to_owned(),
                        Source::Env(var) => var,
                        Source::Flag => format!("--{key}"),
                    };
                    format!("{key} = {shown} # {from}")
                }
                _ => match derived.get(key) {
                    Some((value, how)) => {
                        let mut value = toml::Value::String((*value).clone());
                        if options.urls.contains(&key) {
                            value = hide_url_password(value);
                        }
                        if matches!(arg.get_action(), ArgAction::Append) {
                            value = toml::Value::Array(vec![value]);
                        }
                        format!("{key} = {value} # default: {how}")
                    }
                    None => format!("# {key} = (unset)"),
                },
            };
            out.push_str(&line);
            out.push('\n');
        }
        for note in &options.notes {
            out.push_str(&format!("# {note}\n"));
        }
        out
    }

    /// The value of `arg` as TOML: a boolean for a switch, a list for a
    /// repeatable flag, an integer for a number, else a string.
    fn value(&self, arg: &clap::Arg, id: &str) -> Option<toml::Value> {
        if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
            return self
                .matches
                .try_get_one::<bool>(id)
                .ok()
                .flatten()
                .map(|b| toml::Value::Boolean(*b));
        }
        let raw: Vec<String> = self
            .matches
            .try_get_raw(id)
            .ok()
            .flatten()?
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let integer = is_integer(arg);
        let one = |text: String| match text.parse::<i64>() {
            Ok(n) if integer => toml::Value::Integer(n),
            _ => toml::Value::String(text),
        };
        if matches!(arg.get_action(), ArgAction::Append) {
            Some(toml::Value::Array(raw.into_iter().map(one).collect()))
        } else {
            raw.into_iter().next().map(one)
        }
    }
}

fn is_integer(arg: &clap::Arg) -> bool {
    use std::any::TypeId;
    let id = arg.get_value_parser().type_id();
    [
        TypeId::of::<u64>(),
        TypeId::of::<u32>(),
        TypeId::of::<u16>(),
        TypeId::of::<usize>(),
        TypeId::of::<i64>(),
        TypeId::of::<i32>(),
    ]
    .iter()
    .any(|t| id == *t)
}

/// `postgres://user:secret@host/db?password=x` → `postgres://user:<hidden>@host/db?password=<hidden>`.
pub fn hide_password(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((user_info, host)) if !user_info.contains('/') => {
                match user_info.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:<hidden>@{host}"),
                    None => url.to_owned(),
                }
            }
            _ => url.to_owned(),
        },
        None => url.to_owned(),
    };
    if let Some((base, query)) = out.clone().split_once('?') {
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                    format!("{name}=<hidden>")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{base}?{}", query.join("&"));
    }
    out
}

fn hide_url_password(value: toml::Value) -> toml::Value {
    match value {
        toml::Value::String(url) => toml::Value::String(hide_password(&url)),
        other => other,
    }
}

/// `command` with no environment variables: for tests, which must not depend
/// on the environment they run in.
pub fn without_env(command: Command) -> Command {
    command.mut_args(|arg| arg.env(None))
}

#[cfg(test)]
mod tests;
