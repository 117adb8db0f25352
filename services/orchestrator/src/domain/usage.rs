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

use super::{DomainError, MAX_COST_PICO, PICO_PER_USD, Run, RunId, WorkspaceId, usd};

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
mod tests;
