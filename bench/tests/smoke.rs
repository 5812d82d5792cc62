//! A short run of `outbox-bench`, so the benchmark cannot rot. It checks that every scenario
//! runs and reports its figures; it asserts no speed. The relays it starts are the
//! `outbox-relay` binary beside `outbox-bench` in the target dir, which cargo does not build
//! for this package's tests: `make test` builds it first (`cargo build --workspace
//! --all-targets`), and the bench says so when it is missing.

use std::process::Command;

/// The benchmark binary under test.
const BENCH: &str = env!("CARGO_BIN_EXE_outbox-bench");

#[test]
fn bench_runs_every_scenario_and_writes_json() {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BENCH)
        .args([
            "--events",
            "2000",
            "--rates",
            "200",
            "--polled-rates",
            "300",
            "--notify-always-rates",
            "250",
            "--bloat-rows",
            "5000",
            "--repeat",
            "2",
            "--duration",
            "2s",
            "--out",
        ])
        .arg(out_dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for scenario in [
        "drain (keep rows)",
        "drain (delete mode)",
        "replicas: 3",
        "hot key",
        "baseline: seed algorithm",
        "ceiling: relay SQL",
        "latency at 200/s",
        "latency at 300/s, poll 10ms",
        "latency at 250/s, NOTIFY always",
        "bloat: behind 5000 published rows",
        "bloat / clean drain",
        "drain / seed algorithm",
        "drain / ceiling",
        "tls: off",
        "tls: on",
        "TLS / plain drain",
        "durability: no wait",
        "durability: wait_replicas = 1",
        "wait_replicas=1 / no wait drain",
        "standbys: no wait (own Postgres + 1 standby)",
        "standbys: wait_standbys = 1 (own Postgres + 1 standby)",
        "wait_standbys=1 / no wait drain",
        "standbys: latency at 200/s, no wait",
        "standbys: latency at 200/s, wait_standbys = 1",
        "redis cluster: 3 masters",
        "cluster / single node",
        "end to end: drain to inbox consumers",
        "end to end: latency at 200/s, inbox",
        "end to end / relay-only drain",
        "fleet: relay-only drain, 8 partitions",
        "fleet: drain to 3 inbox consumers, 8 partitions",
        "fleet: end to end / relay-only drain",
        "fleet: latency at 200/s, 8 partitions, 3 consumers",
        "fleet: a 3rd consumer joins at 200/s",
        "adopted table: drain, plain inserts",
        "adopted table: drain, insert-then-delete",
        "adopted / native drain",
        "cloudevents: drain (keep rows)",
        "cloudevents / default envelope drain",
        "parking: drain, park_on_dead",
        "park_on_dead / default drain",
        "parking: end to end, park_keys",
        "park_keys / default end to end",
        "producer inserts: table not adopted",
        "producer inserts: adopted table",
        "producer inserts: adopted, relay busy",
        "producer inserts: adopted, NOTIFY off",
        "producer inserts: adopted, relay busy / not adopted",
        "producer inserts: into outbox",
        "producer inserts: adopted / into outbox",
    ] {
        assert!(stdout.contains(scenario), "missing {scenario}:\n{stdout}");
    }
    let json = std::fs::read_dir(out_dir.path())
        .expect("out dir")
        .filter_map(|e| e.ok())
        .find(|e| e.path().extension().is_some_and(|x| x == "json"))
        .expect("a JSON result");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json.path()).expect("read")).expect("json");
    let figures = report["figures"].as_array().expect("figures");
    assert_eq!(figures.len(), 37);
    // Every measured span says what it cost the machine: cores busy (of this machine's) and
    // Redis CPU, so a speed figure can be read against saturation.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for f in figures {
        let busy = f["busy_cores"].as_f64().unwrap_or(-1.0);
        assert!(busy > 0.0 && busy <= cores + 0.01, "busy cores of {f}");
        assert!(
            f["redis_cpu_seconds"].as_f64().is_some(),
            "redis cpu of {f}"
        );
    }
    // Two rounds: each throughput scenario reports its median and both rounds.
    let keep = figures
        .iter()
        .find(|f| f["scenario"] == "drain (keep rows)")
        .expect("drain");
    let rounds = keep["rounds_events_per_sec"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2, "{keep}");
    assert!(rounds
        .iter()
        .any(|r| r.as_f64() == keep["events_per_sec"].as_f64()));
    // The ratios are taken round by round (the ceiling runs beside the drain in each round),
    // and their value is the median of the rounds' ratios.
    let ratios = report["ratios"].as_array().expect("ratios");
    let ceiling = ratios
        .iter()
        .find(|r| r["name"] == "drain / ceiling")
        .expect("drain / ceiling in the JSON");
    let per_round: Vec<f64> = ceiling["rounds"]
        .as_array()
        .expect("rounds of the ratio")
        .iter()
        .filter_map(|r| r.as_f64())
        .collect();
    assert_eq!(per_round.len(), 2, "{ceiling}");
    let value = ceiling["value"].as_f64().expect("value");
    assert!(
        (value - (per_round[0] + per_round[1]) / 2.0).abs() < 1e-9,
        "{ceiling}"
    );
    let latency = figures
        .iter()
        .find(|f| f["scenario"] == "latency at 200/s")
        .expect("latency");
    assert_eq!(latency["events"], 400, "every produced event was received");
    assert!(latency["p99_ms"].as_f64().is_some());
    let polled = figures
        .iter()
        .find(|f| f["scenario"] == "latency at 300/s, poll 10ms")
        .expect("polled latency");
    assert_eq!(polled["events"], 600, "every produced event was received");
    let svg = std::fs::read_to_string(json.path().with_extension("svg")).expect("an SVG chart");
    assert!(svg.starts_with("<svg") && svg.contains("hot key"), "{svg}");
}

#[test]
fn a_missing_relay_binary_is_a_one_line_error_that_says_how_to_build_it() {
    let out = Command::new(BENCH)
        .args([
            "--relay-bin",
            "/nonexistent/outbox-relay",
            "--only",
            "drain",
        ])
        .output()
        .expect("run bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no relay binary at /nonexistent/outbox-relay")
            && stderr.contains("cargo build --release --bins"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn a_rate_of_zero_is_refused_before_anything_runs() {
    let out = Command::new(BENCH)
        .args(["--rates", "1000,0"])
        .output()
        .expect("run bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("above 0"), "{stderr}");
}
