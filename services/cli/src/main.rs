//! `chorus`: the command line for people. Create, plan, answer, start and
//! follow tasks; manage workspaces, providers, agents and keys. Where it
//! connects and with which key comes from a profile or the environment,
//! never from the command line (see `chorus profile --help`).

mod admin;
mod approvals;
mod client;
mod fail;
mod follow;
mod output;
mod profile;
mod prompt;
mod providers;
mod reconnect;
mod task;
mod task_change;
mod task_list;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory as _, Parser, Subcommand};

use crate::fail::{EXIT_CODES, Exit, Fail};
use crate::output::Format;

#[derive(Debug, Parser)]
#[command(
    name = "chorus",
    version,
    about = "Drive Chorus: tasks, workspaces, providers, agents and keys",
    long_about = "Drive Chorus: tasks, workspaces, providers, agents and keys.\n\nWhere Chorus is and which API key to use come from the environment (CHORUS_ADDRESS, CHORUS_API_KEY_FILE or CHORUS_API_KEY, CHORUS_TLS_CA, CHORUS_TLS_DOMAIN), else from a profile in the configuration file (chorus profile set), else from the local all-in-one: http://127.0.0.1:50051 with ./.chorus/admin.key. A key is never taken from the command line.",
    after_help = EXIT_CODES
)]
struct Cli {
    /// The profile to use (else CHORUS_PROFILE, else the file's default).
    #[arg(long, global = true, env = "CHORUS_PROFILE")]
    profile: Option<String>,
    /// How to print answers: tables for people, json for scripts (one JSON
    /// document, or one per line when following).
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tasks: run one start to end, or create, plan, answer, start, watch,
    /// cancel, delete, list and show them.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Workspaces: the directories agents work in.
    #[command(subcommand)]
    Workspace(admin::WorkspaceCommand),
    /// Providers: the models and CLIs agents run on (keys are write-only).
    #[command(subcommand)]
    Provider(providers::ProviderCommand),
    /// Agents: instructions, allowed tools, provider.
    #[command(subcommand)]
    Agent(admin::AgentCommand),
    /// API keys: create (the secret is shown once), list, revoke.
    #[command(subcommand)]
    Key(admin::KeyCommand),
    /// Answers a call that waits for approval: approve it (with --for-task,
    /// its rule for the rest of the task), or deny it with a reason.
    Approve(approvals::Approve),
    /// The orchestrator: version, sandbox tier, replicas and their leases.
    Status,
    /// What model calls cost over UTC days, summed by workspace, agent,
    /// provider, model or day.
    Usage {
        /// Only this workspace (name or id).
        #[arg(long, short)]
        workspace: Option<String>,
        /// What to sum by, comma-separated: workspace, agent, provider, model, day.
        #[arg(long, value_delimiter = ',')]
        by: Vec<String>,
        /// The first UTC day, YYYY-MM-DD (default: 30 days before --to).
        #[arg(long)]
        from: Option<String>,
        /// The day after the last one, YYYY-MM-DD (default: tomorrow).
        #[arg(long)]
        to: Option<String>,
    },
    /// Profiles: where Chorus is and which key to use.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Prints a completion script for a shell (e.g. `chorus completions bash
    /// > /etc/bash_completion.d/chorus`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum ProfileCommand {
    /// Saves a profile (the key is read from a file, or at the prompt with
    /// --key-stdin, never from the command line).
    Set(ProfileSet),
    /// Shows which address and key a command would use, and where each comes
    /// from (the key itself is not shown).
    Show,
    /// Lists the saved profiles.
    List,
}

#[derive(Debug, Args)]
struct ProfileSet {
    name: String,
    /// http://host:port, or https://host:port for TLS.
    #[arg(long)]
    address: String,
    /// A file holding the API key (kept as a path; the file must be readable
    /// by its owner only).
    #[arg(long, conflicts_with = "key_stdin")]
    key_file: Option<PathBuf>,
    /// Read the API key from standard input (at a terminal: a prompt that does
    /// not echo) and keep it in the configuration file, readable by you only.
    #[arg(long)]
    key_stdin: bool,
    /// The PEM CA that signed the server's certificate.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// The name in the server's certificate, when not the address's host.
    #[arg(long)]
    tls_domain: Option<String>,
    /// Make it the default profile.
    #[arg(long)]
    default: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.output;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chorus: cannot start: {e}");
            return ExitCode::from(Exit::Error as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(fail) => {
            output::error(format, &fail);
            ExitCode::from(fail.exit as u8)
        }
    }
}

async fn run(cli: Cli) -> Result<Exit, Fail> {
    let env = profile::ProcessEnv;
    let connect = || {
        let target = profile::resolve(&env, cli.profile.as_deref())?;
        client::connect(&target)
    };
    let out = output::Out::new(cli.output);
    match cli.command {
        Command::Task(command) => task::run(command, connect()?, &out).await,
        Command::Workspace(command) => admin::workspace(command, connect()?, &out).await,
        Command::Provider(command) => providers::run(command, connect()?, &out).await,
        Command::Agent(command) => admin::agent(command, connect()?, &out).await,
        Command::Key(command) => admin::key(command, connect()?, &out).await,
        Command::Approve(a) => {
            let mut client = connect()?;
            approvals::approve(&mut client, &out, a).await
        }
        Command::Status => admin::status(connect()?, &out).await,
        Command::Usage {
            workspace,
            by,
            from,
            to,
        } => admin::usage(connect()?, &out, workspace, by, from, to).await,
        Command::Profile(command) => profile_command(command, &env, cli.profile.as_deref(), &out),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "chorus", &mut script);
            output::gone(std::io::Write::write_all(&mut std::io::stdout(), &script));
            Ok(Exit::Ok)
        }
    }
}

fn profile_command(
    command: ProfileCommand,
    env: &profile::ProcessEnv,
    chosen: Option<&str>,
    out: &output::Out,
) -> Result<Exit, Fail> {
    let path = profile::config_path(env)?;
    match command {
        ProfileCommand::Set(set) => {
            let mut config = profile::Config::load(&path)?;
            let key = if set.key_stdin {
                Some(prompt::secret("API key: ")?)
            } else {
                None
            };
            config.profiles.insert(
                set.name.clone(),
                profile::Profile {
                    address: Some(set.address),
                    key_file: set.key_file,
                    key,
                    ca_file: set.ca_file,
                    tls_domain: set.tls_domain,
                },
            );
            if set.default || config.default.is_none() {
                config.default = Some(set.name.clone());
            }
            config.save(&path)?;
            out.note(&format!(
                "saved profile '{}' in {}",
                set.name,
                path.display()
            ));
            Ok(Exit::Ok)
        }
        ProfileCommand::Show => {
            let target = profile::resolve(env, chosen)?;
            out.value(
                &serde_json::json!({
                    "address": target.address,
                    "caFile": target.ca_file,
                    "tlsDomain": target.tls_domain,
                    "from": target.origin,
                    "config": path,
                }),
                &[("ADDRESS", "address"), ("FROM", "from")],
            );
            Ok(Exit::Ok)
        }
        ProfileCommand::List => {
            let config = profile::Config::load(&path)?;
            let rows: Vec<serde_json::Value> = config
                .profiles
                .iter()
                .map(|(name, p)| {
                    serde_json::json!({
                        "name": name,
                        "default": config.default.as_deref() == Some(name),
                        "address": p.address,
                        "key": if p.key.is_some() { "stored".to_owned() } else {
                            p.key_file.as_ref().map(|f| f.display().to_string()).unwrap_or_default()
                        },
                    })
                })
                .collect();
            out.table(
                &rows,
                &[
                    ("NAME", "name"),
                    ("DEFAULT", "default"),
                    ("ADDRESS", "address"),
                    ("KEY", "key"),
                ],
            );
            Ok(Exit::Ok)
        }
    }
}
