//! Small timing statistics for the bench binaries.

use std::time::Duration;

/// Sorted samples with percentile helpers.
#[derive(Debug, Clone)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self(samples)
    }

    /// The p-th percentile (0..=100), nearest rank.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }

    pub fn median(&self) -> Duration {
        self.percentile(50.0)
    }

    pub fn mean(&self) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.iter().sum::<Duration>() / u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Peak resident set size of this process, in MiB.
pub fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// User + system CPU seconds of this process so far.
pub fn cpu_seconds() -> f64 {
    cpu_seconds_in("/proc/self/stat")
}

/// The machine's CPU time so far, in ticks: (softirq, all), from the first
/// line of `/proc/stat` (user, nice, system, idle, iowait, irq, softirq,
/// steal; guest time is already counted in user and nice).
pub fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    (fields.get(6).copied().unwrap_or(0), fields.iter().sum())
}

/// User + system CPU seconds of process `pid` (all its threads) so far.
pub fn cpu_seconds_of(pid: u32) -> f64 {
    cpu_seconds_in(&format!("/proc/{pid}/stat"))
}

fn cpu_seconds_in(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// User + system CPU seconds of this process's reaped children (and theirs).
pub fn children_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [13, 14]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// How many processes run `program` (a canonical path) and their memory
/// together, in KiB: the proportional set size (shared pages divided among the
/// processes sharing them) where the kernel shows it, else the resident size.
pub fn processes_rss_kib(program: &std::path::Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    let (mut count, mut kib) = (0, 0);
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if std::fs::read_link(path.join("exe")).is_ok_and(|exe| exe == program) {
            count += 1;
            let field = |file: &str, name: &str| {
                std::fs::read_to_string(path.join(file))
                    .ok()?
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            };
            kib += field("smaps_rollup", "Pss:")
                .or_else(|| field("status", "VmRSS:"))
                .unwrap_or(0);
        }
    }
    (count, kib)
}

/// Samples every 20 ms, until stopped, the most processes of a program that ran
/// at once and the most memory they held together.
#[derive(Debug)]
pub struct PeakSampler {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<(u64, u64)>,
}

impl PeakSampler {
    pub fn start(program: std::path::PathBuf) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let (mut count, mut kib) = (0, 0);
            while !until.is_cancelled() {
                let (c, k) = processes_rss_kib(&program);
                count = count.max(c);
                kib = kib.max(k);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (count, kib)
        });
        Self { stop, task }
    }

    /// The peak process count and the peak memory (MiB).
    pub async fn finish(self) -> (u64, f64) {
        self.stop.cancel();
        let (count, kib) = self.task.await.unwrap_or_default();
        #[allow(clippy::cast_precision_loss)]
        (count, kib as f64 / 1024.0)
    }
}

/// A bench's size setting: the number in variable `name`, else `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Times `calls` runs of the command `make` builds, each from spawn to exit
/// (its output read), after a tenth as many untimed; panics on a failed run.
pub fn spawned(mut make: impl FnMut() -> std::process::Command, calls: usize) -> Samples {
    let run = |cmd: &mut std::process::Command| {
        let started = std::time::Instant::now();
        let out = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("spawn");
        let elapsed = started.elapsed();
        assert!(
            out.status.success(),
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        elapsed
    };
    for _ in 0..calls / 10 {
        run(&mut make());
    }
    Samples::new((0..calls).map(|_| run(&mut make())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = Samples::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(s.median(), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(s.mean(), Duration::from_micros(50_500));
    }
}
