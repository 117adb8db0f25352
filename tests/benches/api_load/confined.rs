//! The attacks of `api_load` that cost their attacker CPU as long as they
//! last, each from a process of its own confined to half a core, and the
//! 20-address flood again behind the host's firewall recipe.

use std::path::Path;

use chorus_tests::orchestrator::OrchestratorProcess;
use chorus_tests::stats::ms;

use super::Legit;

/// The attacks that cost their attacker CPU as long as they last, made by a
/// process of their own confined to half a core (`chorus_tests::confined`):
/// the legitimate callers' p99 shows what the service does under them, not
/// what the attacker's own CPU takes from the machine.
pub(super) async fn attacks(o: &OrchestratorProcess, legit: &Legit, stranger: &str, n: usize) {
    let (orchestrator, tool_exec) = (o.addr.to_string(), o.tool_exec_addr.to_string());
    let attacks: [(&str, [&str; 4]); 3] = [
        (
            "19,000 silent connections from one address, reopened as closed",
            ["silent", &orchestrator, "19000", "1"],
        ),
        (
            "19,000 silent connections from 20 addresses, reopened as closed",
            ["silent", &orchestrator, "19000", "20"],
        ),
        (
            "300 callers with tokens of an unknown key, without pause",
            ["flood", &tool_exec, stranger, "300"],
        ),
    ];
    let mut notes = Vec::new();
    let pid = u32::try_from(o.pid()).expect("a pid");
    for (what, args) in attacks {
        notes.push(confined_attack(pid, legit, n, what, &args).await);
    }
    notes.extend(guarded_attack(o, legit, n).await);
    for note in notes {
        println!("{note}");
    }
}

/// Runs the attacker with `args`, confined to half a core, while the
/// legitimate callers take their p99 (printed as a row); returns a note of
/// where the machine's time went meanwhile: the kernel's softirq work (TCP
/// handshakes and closes) is charged to no cgroup of the attacker.
async fn confined_attack(pid: u32, legit: &Legit, n: usize, what: &str, args: &[&str]) -> String {
    let mut command =
        std::process::Command::new(chorus_tests::built_bin("attacker", "chorus-tests"));
    command.args(args);
    let attacker = chorus_tests::confined::Confined::start(command, 0.5, "attacker");
    let (softirq, all) = chorus_tests::stats::machine_ticks();
    let server = chorus_tests::stats::cpu_seconds_of(pid);
    let (get, read) = legit.p99(n).await;
    let (softirq_after, all_after) = chorus_tests::stats::machine_ticks();
    let server = chorus_tests::stats::cpu_seconds_of(pid) - server;
    println!(
        "| {what} (the attacker confined to half a core) | {} | {} |",
        ms(get),
        ms(read)
    );
    attacker.stop();
    let share = |part: u64| 100.0 * part as f64 / (all_after - all).max(1) as f64;
    format!(
        "- during {what}: softirq {:.0} % of the machine's time, the orchestrator {:.2} s of CPU",
        share(softirq_after - softirq),
        server
    )
}

/// The silent connections of 20 addresses again, with the host's firewall
/// loaded from `deploy/nftables/chorus-guard.nft` for the orchestrator's
/// and tool-exec's ports (root and `nft` needed: otherwise the row says it
/// was not measured). The table is removed afterwards. Returns the attack's
/// note (see [`confined_attack`]).
async fn guarded_attack(o: &OrchestratorProcess, legit: &Legit, n: usize) -> Option<String> {
    const WHAT: &str =
        "19,000 silent connections from 20 addresses, behind deploy/nftables/chorus-guard.nft";
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .join("deploy/nftables/chorus-guard.nft");
    let loaded = std::process::Command::new("nft")
        .arg("-D")
        .arg(format!("ORCHESTRATOR_PORT={}", o.addr.port()))
        .arg("-D")
        .arg(format!("TOOL_EXEC_PORT={}", o.tool_exec_addr.port()))
        .arg("-f")
        .arg(&recipe)
        .output();
    match loaded {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            println!(
                "| {WHAT} | not measured: nft refused the recipe ({}) | |",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            println!(
                "| {WHAT} | not measured: nft cannot run ({e}; run as root with nftables) | |"
            );
            return None;
        }
    }
    let orchestrator = o.addr.to_string();
    let pid = u32::try_from(o.pid()).expect("a pid");
    let note = confined_attack(
        pid,
        legit,
        n,
        WHAT,
        &["silent", &orchestrator, "19000", "20"],
    )
    .await;
    let _ = std::process::Command::new("nft")
        .args(["delete", "table", "inet", "chorus_guard"])
        .status();
    Some(note)
}
