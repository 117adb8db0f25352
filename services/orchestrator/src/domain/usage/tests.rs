use super::*;
use crate::domain::{cost_limit, show_usd};

fn call(model: &str, input: u64, output: u64, cache_read: u64) -> ModelCall {
    ModelCall {
        model: model.into(),
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        ..ModelCall::default()
    }
}

/// Pico-dollars in a micro-dollar.
const MICRO: u64 = 1_000_000;

const TABLE: &str = r#"
    [models."gpt-4o"]
    input = 2.5
    output = 10.0
    cache-read = 1.25

    [providers.cheap."gpt-4o"]
    input = 1.0
    output = 1.0
"#;

#[test]
fn the_table_prices_cached_input_apart_and_a_provider_overrides_the_model() {
    let prices = Prices::parse(TABLE).expect("a table");
    // 1,000 input of which 400 cached, 100 output:
    // 600 × 2.5 + 400 × 1.25 + 100 × 10 = 1,500 + 500 + 1,000 micro-dollars.
    let c = call("gpt-4o", 1_000, 100, 400);
    assert_eq!(prices.cost("openai", &c), Some(3_000 * MICRO));
    assert_eq!(
        prices.cost("cheap", &c),
        Some(1_100 * MICRO),
        "the provider's own price"
    );
    assert_eq!(prices.cost("openai", &call("llama", 10, 10, 0)), None);
}

#[test]
fn a_call_is_priced_by_its_provider_else_the_table_else_not_at_all() {
    let prices = Prices::parse(TABLE).expect("a table");
    let reported = ModelCall {
        reported_pico_usd: Some(42 * MICRO),
        ..call("gpt-4o", 1_000, 100, 0)
    };
    let p = PricedCall::of(reported, "openai", &prices);
    assert_eq!(
        (p.cost_pico_usd, p.source),
        (Some(42_000_000), CostSource::Provider)
    );
    let p = PricedCall::of(call("gpt-4o", 1_000, 0, 0), "openai", &prices);
    assert_eq!(
        (p.cost_pico_usd, p.source),
        (Some(2_500_000_000), CostSource::PriceTable)
    );
    let unpriced = PricedCall::of(call("llama", 7, 3, 0), "local", &prices);
    assert_eq!(unpriced.source, CostSource::Unpriced);
    let mut usage = Usage::default();
    usage.record(&unpriced);
    assert_eq!(
        (usage.model_calls, usage.unpriced_calls, usage.cost_pico_usd),
        (1, 1, 0),
        "unpriced is counted, not taken as free"
    );
}

#[test]
fn a_reported_total_corrects_what_was_recorded_and_covers_the_unpriced() {
    let none = Prices::default();
    let recorded = vec![
        PricedCall::of(call("m", 10, 1, 0), "p", &none),
        PricedCall::of(call("m", 20, 1, 0), "p", &none),
    ];
    let mut total = Usage::default();
    for row in &recorded {
        total.record(row);
    }
    assert_eq!((total.model_calls, total.unpriced_calls), (2, 2));
    let correction = CostCorrection {
        reported_pico_usd: 12_300 * MICRO,
        reported_tokens: call("", 30, 12, 0),
        recorded: recorded.clone(),
    }
    .as_call("m")
    .expect("a correction");
    total.record(&correction);
    assert_eq!(
        (total.model_calls, total.unpriced_calls, total.cost()),
        (2, 0, 12_300 * MICRO),
        "the total's cost, and no call left unpriced"
    );
    assert_eq!(
        (total.input_tokens, total.output_tokens),
        (30, 12),
        "the output the stream had not counted yet"
    );
    // A table that priced too high is corrected down.
    let table = Prices::parse("[models.m]\ninput = 5.0\noutput = 0.0\n").expect("table");
    let high = vec![PricedCall::of(call("m", 30, 0, 0), "p", &table)];
    let lower = CostCorrection {
        reported_pico_usd: 100 * MICRO,
        reported_tokens: call("", 30, 0, 0),
        recorded: high.clone(),
    }
    .as_call("m")
    .expect("a correction");
    assert_eq!(lower.cost_pico_usd, Some(-50_000_000));
    assert!(
        CostCorrection {
            reported_pico_usd: 150 * MICRO,
            reported_tokens: call("", 30, 0, 0),
            recorded: high.clone(),
        }
        .as_call("m")
        .is_none(),
        "nothing to correct"
    );
    // A total of 0 for calls made is no price: the calls stay unpriced.
    let zero = CostCorrection {
        reported_pico_usd: 0,
        reported_tokens: call("", 30, 2, 0),
        recorded,
    }
    .as_call("m");
    assert_eq!(zero.map(|z| (z.cost_pico_usd, z.covers_unpriced)), None);
}

/// Claude Code stopped by its own budget reports a total of the calls
/// before the last: the last keeps its own cost, and stays counted.
#[test]
fn a_total_that_misses_the_last_call_corrects_only_the_calls_it_covers() {
    let table = Prices::parse("[models.m]\ninput = 1.0\noutput = 1.0\n").expect("table");
    let recorded: Vec<PricedCall> = [(10, 23), (12, 26), (14, 29)]
        .into_iter()
        .map(|(i, o)| PricedCall::of(call("m", i, o, 0), "p", &table))
        .collect();
    let mut total = Usage::default();
    for row in &recorded {
        total.record(row);
    }
    let correction = CostCorrection {
        reported_pico_usd: 100 * MICRO,
        reported_tokens: call("", 22, 49, 0),
        recorded,
    }
    .as_call("m")
    .expect("a correction");
    total.record(&correction);
    // Covered: 22 + 49 = 71 µ$ by the table, 100 µ$ by the CLI; the
    // third call keeps its 43 µ$.
    assert_eq!(total.cost(), 143 * MICRO);
    assert_eq!((total.input_tokens, total.output_tokens), (36, 78));
    assert_eq!(total.model_calls, 3);
}

#[test]
fn an_estimated_call_is_counted_never_priced_and_taken_back_by_its_answer() {
    let table = Prices::parse("[models.m]\ninput = 1.0\noutput = 1.0\n").expect("table");
    let sent = PricedCall::of(ModelCall::estimate("m", 401, 0), "p", &table);
    assert_eq!(
        (sent.cost_pico_usd, sent.source),
        (None, CostSource::Unpriced)
    );
    let mut usage = Usage::default();
    usage.record(&sent);
    assert_eq!(
        (
            usage.input_tokens,
            usage.model_calls,
            usage.estimated_calls,
            usage.unpriced_calls
        ),
        (101, 1, 1, 1)
    );
    let answered = PricedCall::of(call("m", 90, 7, 0), "p", &table);
    usage.unrecord(&sent);
    usage.record(&answered);
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.model_calls,
            usage.estimated_calls,
            usage.unpriced_calls
        ),
        (90, 7, 1, 0, 0)
    );
    assert_eq!(usage.cost(), 97 * MICRO);
}

/// Ten calls of 0.4 micro-dollars each cost 4 micro-dollars, not $0:
/// nothing is rounded before the sum is shown.
#[test]
fn tiny_costs_add_up_exactly() {
    let prices = Prices::parse("[models.m]\ninput = 0.4\noutput = 0.0\n").expect("table");
    let mut usage = Usage::default();
    for _ in 0..10 {
        usage.record(&PricedCall::of(call("m", 1, 0, 0), "p", &prices));
    }
    assert_eq!(usage.cost(), 4 * MICRO);
    assert_eq!(usage.to_json()["cost_usd"], 0.000_004);
    assert_eq!(show_usd(usage.cost()), "$0.000004");
    assert_eq!(show_usd(12_345 * MICRO), "$0.0123");
    // A price with six decimals is still exact.
    let fine = Prices::parse("[models.m]\ninput = 0.018750\noutput = 0.0\n").expect("table");
    assert_eq!(fine.cost("p", &call("m", 3, 0, 0)), Some(56_250));
}

#[test]
fn a_cost_limit_that_cannot_be_kept_is_refused_naming_the_largest() {
    assert_eq!(
        cost_limit("cost_usd", 2.5).expect("fine"),
        2_500_000_000_000
    );
    for huge in [1e15, 1e300, f64::MAX] {
        let err = cost_limit("cost_usd", huge).expect_err("too large");
        assert!(
            err.to_string()
                .contains("the largest cost limit is $9223372.036855"),
            "{err}"
        );
    }
    for bad in [f64::INFINITY, f64::NAN, f64::NEG_INFINITY] {
        let err = cost_limit("cost_usd", bad).expect_err("not a number");
        assert!(
            err.to_string().contains("is not an amount of US dollars"),
            "{err}"
        );
    }
    let err = cost_limit("cost_usd", 0.0).expect_err("zero");
    assert!(err.to_string().contains("more than 0"), "{err}");
}

#[test]
fn a_bad_table_is_refused_naming_the_entry() {
    let err = Prices::parse("[models.x]\ninput = -1.0\noutput = 1.0\n").expect_err("negative");
    assert!(err.to_string().contains("models.\"x\""), "{err}");
    let err = Prices::parse("[models.x]\ninput = 1.0\n").expect_err("no output");
    assert!(err.to_string().contains("output"), "{err}");
    let err = Prices::parse("[model.x]\n").expect_err("unknown key");
    assert!(err.to_string().contains("model"), "{err}");
}

#[test]
fn dates_are_utc_days_and_a_bad_one_is_named() {
    assert_eq!(day_of(86_400_000), 1);
    assert_eq!(day_of(-1), -1);
    assert_eq!(day_of_date("from", "1970-01-02").expect("a date"), 1);
    assert_eq!(date_of_day(20_418), "2025-11-26");
    assert_eq!(
        day_of_date("to", &date_of_day(20_419)).expect("round trip"),
        20_419
    );
    assert_eq!(date_of_day(month_start(20_418)), "2025-11-01");
    assert_eq!(
        month_start(day_of_date("d", "2026-03-01").expect("a date")),
        day_of_date("d", "2026-03-01").expect("a date")
    );
    let err = day_of_date("from", "26/11/2025").expect_err("not a date");
    assert!(err.to_string().contains("YYYY-MM-DD"), "{err}");
}

#[test]
fn day_sums_group_by_what_is_asked_largest_cost_first() {
    let ws = WorkspaceId::new();
    let row = |day, agent: &str, model: &str, cost| DayUsage {
        workspace_id: ws,
        day,
        agent: agent.into(),
        provider: "p".into(),
        model: model.into(),
        usage: Usage {
            cost_pico_usd: cost,
            model_calls: 1,
            ..Usage::default()
        },
    };
    let rows = [
        row(1, "writer", "a", 10),
        row(1, "editor", "a", 50),
        row(2, "writer", "b", 30),
    ];
    let by_agent = group_usage(&rows, &[UsageDimension::Agent]);
    let summary: Vec<_> = by_agent
        .iter()
        .map(|(k, u)| {
            (
                k.agent.clone().unwrap_or_default(),
                u.cost_pico_usd,
                u.model_calls,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [("editor".into(), 50, 1), ("writer".into(), 40, 2)]
    );
    assert_eq!(by_agent[0].0.day, None, "not grouped by day");
    let total = group_usage(&rows, &[]);
    assert_eq!(total.len(), 1);
    assert_eq!(total[0].1.cost_pico_usd, 90);
    let err = UsageDimension::parse("team").expect_err("no such dimension");
    assert!(err.to_string().contains("agent, provider"), "{err}");
}

#[test]
fn usage_stored_before_these_fields_still_reads() {
    let old: Usage =
        serde_json::from_str(r#"{"input_tokens":3,"output_tokens":4,"cost_pico_usd":5}"#)
            .expect("old usage");
    assert_eq!(
        (old.input_tokens, old.cost_pico_usd, old.model_calls),
        (3, 5, 0)
    );
}
