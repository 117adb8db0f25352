//! What model calls cost: one call as its provider reported it
//! ([`ModelCall`]), what it is recorded as once priced ([`PricedCall`]), sums
//! of them ([`Usage`]), and the operator's price table ([`Prices`]).
//!
//! Cost comes from the provider when it reports one (OpenCode's steps, an API
//! that answers `usage.cost`), else from the price table, else the call is
//! unpriced — counted as such, never taken as free. Claude Code reports its
//! cost only at an attempt's end: that total then corrects what the table
//! priced of the attempt ([`CostCorrection`]).

use std::collections::{BTreeMap, HashMap};

use super::{DomainError, Run, RunId, WorkspaceId};

/// One model call, as the provider reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCall {
    /// The model that answered (else the one asked for).
    pub model: String,
    /// Every input token, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the input: read from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Of the input: written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    /// What the provider said the call cost, in pico-dollars.
    pub reported_pico_usd: Option<u64>,
    /// The tokens are an estimate: the answer said no usage, or the call
    /// was sent and its answer never read (a stop, a crash). Such a call
    /// counts against token limits and is never priced.
    pub estimated: bool,
}

/// Characters per token when a call's tokens must be estimated (the usual
/// rule of thumb for English text and code).
const CHARS_PER_TOKEN: u64 = 4;

impl ModelCall {
    /// A call of `model` whose tokens are estimated from what it carried:
    /// `input_chars` sent and `output_chars` answered.
    pub fn estimate(model: &str, input_chars: usize, output_chars: usize) -> Self {
        let tokens = |chars: usize| (chars as u64).div_ceil(CHARS_PER_TOKEN);
        Self {
            model: model.to_owned(),
            input_tokens: tokens(input_chars),
            output_tokens: tokens(output_chars),
            estimated: true,
            ..Self::default()
        }
    }
}

/// Where a recorded call's cost came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostSource {
    /// The provider reported it with the call.
    Provider,
    /// The operator's price table.
    PriceTable,
    /// Neither: the call is unpriced.
    Unpriced,
    /// A provider's total for an attempt, correcting what was recorded of it.
    Correction,
}

impl CostSource {
    /// The source a stored name stands for (an unknown name is unpriced).
    pub fn parse(text: &str) -> Self {
        [Self::Provider, Self::PriceTable, Self::Correction]
            .into_iter()
            .find(|s| s.as_str() == text)
            .unwrap_or(Self::Unpriced)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provider => "provider",
            Self::PriceTable => "price_table",
            Self::Unpriced => "unpriced",
            Self::Correction => "correction",
        }
    }
}

/// A call as it is recorded: its tokens and its cost, with where the cost
/// came from. A correction carries no tokens; its cost may be negative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricedCall {
    pub call: ModelCall,
    /// Pico-dollars; None when unpriced.
    pub cost_pico_usd: Option<i64>,
    pub source: CostSource,
    /// For a correction: how many of the attempt's unpriced calls its total
    /// covers (they count as priced from then on).
    pub covers_unpriced: u64,
}

impl PricedCall {
    /// `call` of `provider`, priced: the provider's own figure, else the
    /// table's, else unpriced.
    pub fn of(call: ModelCall, provider: &str, prices: &Prices) -> Self {
        let (cost, source) = match call.reported_pico_usd {
            Some(reported) => (Some(signed(reported)), CostSource::Provider),
            // Estimated tokens are never priced: the cost is not known.
            None if call.estimated => (None, CostSource::Unpriced),
            None => match prices.cost(provider, &call) {
                Some(cost) => (Some(signed(cost)), CostSource::PriceTable),
                None => (None, CostSource::Unpriced),
            },
        };
        Self {
            call,
            cost_pico_usd: cost,
            source,
            covers_unpriced: 0,
        }
    }

    /// What this row adds to a count of calls: 1 for a call, 0 for a
    /// correction.
    pub fn calls(&self) -> i64 {
        i64::from(self.source != CostSource::Correction)
    }

    /// What this row adds to a count of calls with estimated tokens.
    pub fn estimated(&self) -> i64 {
        i64::from(self.call.estimated && self.source != CostSource::Correction)
    }

    /// What this row adds to a count of unpriced calls: 1 for an unpriced
    /// call, minus the calls a correction covers.
    pub fn unpriced(&self) -> i64 {
        match self.source {
            CostSource::Unpriced => 1,
            CostSource::Correction => -i64::try_from(self.covers_unpriced).unwrap_or(i64::MAX),
            CostSource::Provider | CostSource::PriceTable => 0,
        }
    }
}

/// A provider's totals for one attempt (Claude Code's result line: its
/// `total_cost_usd` and `usage`), against what was recorded of that
/// attempt's calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostCorrection {
    /// The provider's total cost; 0 when it has no price for the model.
    pub reported_pico_usd: u64,
    /// The provider's token totals (`model` unused).
    pub reported_tokens: ModelCall,
    /// The attempt's calls as they were recorded.
    pub recorded: Vec<PricedCall>,
}

impl CostCorrection {
    /// The correction as a recorded row. The totals cover the attempt's
    /// first calls, as many as their tokens account for (a CLI stopped by
    /// its own budget reports a total without the call it was answered last:
    /// that call keeps the cost it was recorded with). The row holds the
    /// tokens the totals have beyond the calls recorded, and the reported
    /// cost less the recorded cost of the calls it covers, covering their
    /// unpriced ones. A reported cost of 0 for calls made is no price, not a
    /// free call: the costs stay as recorded. None when there is nothing to
    /// correct.
    pub fn as_call(self, model: &str) -> Option<PricedCall> {
        let t = &self.reported_tokens;
        let mut counted = (0_u64, 0_u64);
        let covered = self
            .recorded
            .iter()
            .take_while(|c| {
                let next = (
                    counted.0.saturating_add(c.call.input_tokens),
                    counted.1.saturating_add(c.call.output_tokens),
                );
                let within = next.0 <= t.input_tokens && next.1 <= t.output_tokens;
                if within {
                    counted = next;
                }
                within
            })
            .count();
        let recorded = &self.recorded[..covered];
        let sum = |f: fn(&ModelCall) -> u64| recorded.iter().map(|c| f(&c.call)).sum::<u64>();
        let missing = ModelCall {
            model: model.to_owned(),
            input_tokens: t.input_tokens.saturating_sub(sum(|c| c.input_tokens)),
            output_tokens: t.output_tokens.saturating_sub(sum(|c| c.output_tokens)),
            cache_read_tokens: t
                .cache_read_tokens
                .saturating_sub(sum(|c| c.cache_read_tokens)),
            cache_write_tokens: t
                .cache_write_tokens
                .saturating_sub(sum(|c| c.cache_write_tokens)),
            ..ModelCall::default()
        };
        let priced = self.reported_pico_usd > 0;
        let recorded_cost: i64 = recorded.iter().filter_map(|c| c.cost_pico_usd).sum();
        let cost = if priced {
            signed(self.reported_pico_usd) - recorded_cost
        } else {
            0
        };
        let covers = if priced {
            recorded
                .iter()
                .filter(|c| c.cost_pico_usd.is_none())
                .count() as u64
        } else {
            0
        };
        let tokens = missing.input_tokens
            + missing.output_tokens
            + missing.cache_read_tokens
            + missing.cache_write_tokens;
        (cost != 0 || covers > 0 || tokens > 0).then_some(PricedCall {
            call: missing,
            cost_pico_usd: Some(cost),
            source: CostSource::Correction,
            covers_unpriced: covers,
        })
    }
}

fn signed(pico: u64) -> i64 {
    i64::try_from(pico).unwrap_or(i64::MAX)
}

/// Pico-dollars (millionths of a micro-dollar) in a US dollar. Costs are
/// kept as whole pico-dollars: exact for any price with up to six decimals
/// per million tokens, so a sum of calls is the sum of what each cost, with
/// no rounding before it is shown (decision 0032).
pub const PICO_PER_USD: f64 = 1e12;

/// The largest cost Chorus keeps (a signed 64-bit count of pico-dollars,
/// $9,223,372.036854775807): a limit above it is refused, a sum stops there.
#[allow(clippy::cast_sign_loss)]
pub const MAX_COST_PICO: u64 = i64::MAX as u64;

/// Pico-dollars as US dollars.
pub fn usd(pico: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let dollars = pico as f64 / PICO_PER_USD;
    dollars
}

/// A dollar amount as people read it: four decimals, more for amounts
/// below a cent so that a small cost never shows as $0.0000.
pub fn show_usd(pico: u64) -> String {
    let dollars = usd(pico);
    if pico == 0 || dollars >= 0.01 {
        format!("${dollars:.4}")
    } else {
        let text = format!("${dollars:.12}");
        text.trim_end_matches('0').to_owned()
    }
}

/// A cost limit a caller gives, in US dollars, as pico-dollars: a number
/// more than 0 and at most the largest cost Chorus keeps. `field` names it
/// in the error.
pub fn cost_limit(field: &'static str, dollars: f64) -> Result<u64, DomainError> {
    if !dollars.is_finite() {
        return Err(DomainError::invalid(
            field,
            format!("{dollars} is not an amount of US dollars; give a number such as 2.50"),
        ));
    }
    if dollars <= 0.0 {
        return Err(DomainError::invalid(
            field,
            "must be more than 0 (leave it out for no limit)",
        ));
    }
    if dollars > usd(MAX_COST_PICO) {
        return Err(DomainError::invalid(
            field,
            format!(
                "${dollars} is more than Chorus can keep: the largest cost limit is ${:.6}",
                usd(MAX_COST_PICO)
            ),
        ));
    }
    Ok(Usage::pico_usd(dollars))
}

/// What model calls have cost: tokens, money and calls, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Every input token, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Cost in pico-dollars of the priced calls (a correction
    /// may lower it; a sum is never below 0 when shown).
    pub cost_pico_usd: i64,
    pub model_calls: u64,
    /// Calls neither the provider nor the price table priced: while there
    /// are any, the cost is a lower bound.
    pub unpriced_calls: u64,
    /// Calls whose tokens are estimated (no usage in the answer, or no
    /// answer read): while there are any, the tokens are an estimate.
    pub estimated_calls: u64,
}

impl Usage {
    /// Adds `other` to this usage.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost_pico_usd = self.cost_pico_usd.saturating_add(other.cost_pico_usd);
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.unpriced_calls = self.unpriced_calls.saturating_add(other.unpriced_calls);
        self.estimated_calls = self.estimated_calls.saturating_add(other.estimated_calls);
    }

    /// The sum of `usages`.
    pub fn sum<'a>(usages: impl IntoIterator<Item = &'a Usage>) -> Usage {
        let mut total = Usage::default();
        for usage in usages {
            total.add(*usage);
        }
        total
    }

    /// Adds one recorded row (a call or a correction).
    pub fn record(&mut self, row: &PricedCall) {
        let call = &row.call;
        self.add(Usage {
            input_tokens: call.input_tokens,
            output_tokens: call.output_tokens,
            cache_read_tokens: call.cache_read_tokens,
            cache_write_tokens: call.cache_write_tokens,
            cost_pico_usd: row.cost_pico_usd.unwrap_or(0),
            ..Usage::default()
        });
        self.model_calls = self.model_calls.saturating_add_signed(row.calls());
        self.unpriced_calls = self.unpriced_calls.saturating_add_signed(row.unpriced());
        self.estimated_calls = self.estimated_calls.saturating_add_signed(row.estimated());
    }

    /// Takes back one recorded row: a call sent and recorded as an estimate
    /// is taken back when its answer is recorded in its place.
    pub fn unrecord(&mut self, row: &PricedCall) {
        let call = &row.call;
        self.input_tokens = self.input_tokens.saturating_sub(call.input_tokens);
        self.output_tokens = self.output_tokens.saturating_sub(call.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_sub(call.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_sub(call.cache_write_tokens);
        self.cost_pico_usd = self
            .cost_pico_usd
            .saturating_sub(row.cost_pico_usd.unwrap_or(0));
        self.model_calls = self.model_calls.saturating_add_signed(-row.calls());
        self.unpriced_calls = self.unpriced_calls.saturating_add_signed(-row.unpriced());
        self.estimated_calls = self.estimated_calls.saturating_add_signed(-row.estimated());
    }

    /// All tokens, input and output.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The cost in pico-dollars, never below 0.
    pub fn cost(&self) -> u64 {
        u64::try_from(self.cost_pico_usd.max(0)).unwrap_or(0)
    }

    /// A dollar amount as a provider reports it (`total_cost_usd`), in
    /// pico-dollars; 0 for none, a negative or not a number, and at most
    /// [`MAX_COST_PICO`].
    pub fn pico_usd(dollars: f64) -> u64 {
        if dollars.is_finite() && dollars > 0.0 {
            // Saturating float-to-int conversion.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let pico = (dollars * PICO_PER_USD).round() as u64;
            pico.min(MAX_COST_PICO)
        } else {
            0
        }
    }

    /// The usage as events and API answers show it.
    pub fn to_json(self) -> serde_json::Value {
        let cost = usd(self.cost());
        serde_json::json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": cost,
            "model_calls": self.model_calls,
            "unpriced_calls": self.unpriced_calls,
            "estimated_calls": self.estimated_calls,
        })
    }
}

/// A model's price, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Input read from the prompt cache (else the input price).
    pub cache_read: Option<f64>,
    /// Input written to the prompt cache (else the input price).
    pub cache_write: Option<f64>,
}

impl Price {
    /// What `call` costs at this price, in pico-dollars: a million tokens
    /// at one dollar are 10¹² pico-dollars, so each token costs its price
    /// times 10⁶ — a whole number for any price with up to six decimals, and
    /// the call's cost is exact.
    pub fn cost(&self, call: &ModelCall) -> u64 {
        let cached = call
            .cache_read_tokens
            .saturating_add(call.cache_write_tokens);
        let uncached = call.input_tokens.saturating_sub(cached);
        // Saturating float-to-int conversion of a checked, finite price.
        #[allow(clippy::cast_possible_truncation)]
        let per_token = |price: f64| (price * 1e6).round() as i128;
        let pico = i128::from(uncached) * per_token(self.input)
            + i128::from(call.cache_read_tokens) * per_token(self.cache_read.unwrap_or(self.input))
            + i128::from(call.cache_write_tokens)
                * per_token(self.cache_write.unwrap_or(self.input))
            + i128::from(call.output_tokens) * per_token(self.output);
        u64::try_from(pico.clamp(0, i128::from(MAX_COST_PICO))).unwrap_or(MAX_COST_PICO)
    }

    fn check(&self, what: &str) -> Result<(), String> {
        let all = [
            Some(self.input),
            Some(self.output),
            self.cache_read,
            self.cache_write,
        ];
        if all.into_iter().flatten().all(|p| p.is_finite() && p >= 0.0) {
            Ok(())
        } else {
            Err(format!(
                "{what}: prices are US dollars per million tokens, 0 or more"
            ))
        }
    }
}

/// The operator's price table: prices by model, and by model for a provider
/// of a given name (which win over the model's own).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    #[serde(default)]
    models: HashMap<String, Price>,
    #[serde(default)]
    providers: HashMap<String, HashMap<String, Price>>,
}

impl Prices {
    /// Reads a price table in TOML:
    ///
    /// ```toml
    /// [models."gpt-4o"]          # US dollars per million tokens
    /// input = 2.5
    /// output = 10.0
    /// cache-read = 1.25
    ///
    /// [providers.openrouter."anthropic/claude-sonnet-4"]  # only for providers named openrouter
    /// input = 3.0
    /// output = 15.0
    /// ```
    pub fn parse(text: &str) -> Result<Self, DomainError> {
        let prices: Self =
            toml::from_str(text).map_err(|e| DomainError::invalid("price table", e.to_string()))?;
        for (model, price) in &prices.models {
            price
                .check(&format!("models.\"{model}\""))
                .map_err(|e| DomainError::invalid("price table", e))?;
        }
        for (provider, models) in &prices.providers {
            for (model, price) in models {
                price
                    .check(&format!("providers.{provider}.\"{model}\""))
                    .map_err(|e| DomainError::invalid("price table", e))?;
            }
        }
        Ok(prices)
    }

    /// The price of `model` for the provider named `provider`, if the table has one.
    pub fn price(&self, provider: &str, model: &str) -> Option<&Price> {
        self.providers
            .get(provider)
            .and_then(|models| models.get(model))
            .or_else(|| self.models.get(model))
    }

    /// What `call` of `provider` costs by the table; None when unpriced.
    pub fn cost(&self, provider: &str, call: &ModelCall) -> Option<u64> {
        self.price(provider, &call.model).map(|p| p.cost(call))
    }

    /// How many prices the table holds.
    pub fn len(&self) -> usize {
        self.models.len() + self.providers.values().map(HashMap::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Each run's usage with that of every handoff below it (its subtree's),
/// given all the runs of its task.
pub fn subtree_usage(runs: &[Run]) -> HashMap<RunId, Usage> {
    let parent: HashMap<RunId, Option<RunId>> = runs.iter().map(|r| (r.id, r.parent)).collect();
    let mut totals: HashMap<RunId, Usage> = runs.iter().map(|r| (r.id, Usage::default())).collect();
    for run in runs {
        // The run's own usage counts for it and for each run above it.
        let mut at = Some(run.id);
        let mut steps = 0;
        while let Some(id) = at {
            if let Some(total) = totals.get_mut(&id) {
                total.add(run.usage);
            }
            at = parent.get(&id).copied().flatten();
            steps += 1;
            if steps > runs.len() {
                break; // a cycle cannot happen; never loop on one
            }
        }
    }
    totals
}

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// The UTC day (days since 1970-01-01) of a time in milliseconds.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// The Julian day number of 1970-01-01.
const EPOCH_JULIAN_DAY: i64 = 2_440_588;

/// The first day of the UTC month of `day`.
pub fn month_start(day: i64) -> i64 {
    i32::try_from(day + EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|j| time::Date::from_julian_day(j).ok())
        .map_or(day, |d| day - i64::from(d.day()) + 1)
}

/// A UTC day as `YYYY-MM-DD`.
pub fn date_of_day(day: i64) -> String {
    i32::try_from(day + EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|j| time::Date::from_julian_day(j).ok())
        .and_then(|d| d.format(DATE).ok())
        .unwrap_or_else(|| day.to_string())
}

/// The UTC day of `YYYY-MM-DD`; `field` names it in the error.
pub fn day_of_date(field: &'static str, text: &str) -> Result<i64, DomainError> {
    time::Date::parse(text.trim(), DATE)
        .map(|d| i64::from(d.to_julian_day()) - EPOCH_JULIAN_DAY)
        .map_err(|_| {
            DomainError::invalid(field, format!("'{text}' is not a date: write YYYY-MM-DD"))
        })
}

const DATE: &[time::format_description::FormatItem<'static>] =
    time::macros::format_description!("[year]-[month]-[day]");

/// One row of the day sums: what one agent of a workspace spent on one
/// provider's model in one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayUsage {
    pub workspace_id: WorkspaceId,
    pub day: i64,
    pub agent: String,
    pub provider: String,
    pub model: String,
    pub usage: Usage,
}

/// What usage may be summed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UsageDimension {
    Workspace,
    Agent,
    Provider,
    Model,
    Day,
}

impl UsageDimension {
    const ALL: [Self; 5] = [
        Self::Workspace,
        Self::Agent,
        Self::Provider,
        Self::Model,
        Self::Day,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workspace => "workspace",
            Self::Agent => "agent",
            Self::Provider => "provider",
            Self::Model => "model",
            Self::Day => "day",
        }
    }

    pub fn parse(text: &str) -> Result<Self, DomainError> {
        Self::ALL
            .into_iter()
            .find(|d| d.as_str() == text.trim())
            .ok_or_else(|| {
                DomainError::invalid(
                    "group_by",
                    format!(
                        "'{text}' is not something usage is summed by; use any of: {}",
                        Self::ALL.map(Self::as_str).join(", ")
                    ),
                )
            })
    }
}

/// The values of the dimensions a group is summed by (None: not grouped by it).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct UsageKey {
    pub workspace_id: Option<WorkspaceId>,
    pub agent: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub day: Option<i64>,
}

/// Day sums summed again by `by`: one group per distinct key, the largest
/// cost first.
pub fn group_usage(rows: &[DayUsage], by: &[UsageDimension]) -> Vec<(UsageKey, Usage)> {
    let has = |d: UsageDimension| by.contains(&d);
    let mut groups: BTreeMap<UsageKey, Usage> = BTreeMap::new();
    for row in rows {
        let key = UsageKey {
            workspace_id: has(UsageDimension::Workspace).then_some(row.workspace_id),
            agent: has(UsageDimension::Agent).then(|| row.agent.clone()),
            provider: has(UsageDimension::Provider).then(|| row.provider.clone()),
            model: has(UsageDimension::Model).then(|| row.model.clone()),
            day: has(UsageDimension::Day).then_some(row.day),
        };
        groups.entry(key).or_default().add(row.usage);
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by(|(ka, a), (kb, b)| b.cost_pico_usd.cmp(&a.cost_pico_usd).then(ka.cmp(kb)));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
