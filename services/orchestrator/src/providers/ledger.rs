//! A run's model calls in the ledger, as they happen: a call is recorded
//! when its provider reads its answer (`Progress::ModelCall`), or — where the
//! sending can be seen — when it is sent, with an estimate that its answer
//! then replaces (`Progress::CallSent`, `Progress::CallAnswered`), so that a
//! run stopped or a replica killed between the two leaves the call counted.
//! Each is priced here (the provider's figure, the price table, else
//! unpriced) and recorded with its run's and task's usage, the day's sums and
//! the budget's check in one transaction (`Store::record_model_call`).

use std::collections::HashMap;

use tracing::warn;

use super::{Progress, RunContext};
use crate::domain::{CostCorrection, Event, EventKind, ModelCall, PricedCall, Run, RunState};
use crate::state::AppState;
use crate::store::CallId;

/// The calls of a run's attempts sent and not answered yet, by the key
/// their provider named them with.
#[derive(Debug, Default)]
pub struct Ledger {
    sent: HashMap<String, CallId>,
}

impl Ledger {
    /// Records `progress` when it is a model call, a call sent or answered,
    /// or an attempt's totals; gives back any other progress.
    pub async fn record(
        &mut self,
        state: &AppState,
        ctx: &RunContext,
        progress: Progress,
    ) -> Option<Progress> {
        match progress {
            Progress::CallSent { key, estimate } => {
                if let Some(id) = record_call_sent(state, ctx, estimate).await {
                    self.sent.insert(key, id);
                }
            }
            Progress::CallAnswered { key, call } => {
                record_call_answered(state, ctx, self.sent.remove(&key), call).await;
            }
            Progress::ModelCall(call) => {
                record_call_answered(state, ctx, None, call).await;
            }
            Progress::AttemptTotal {
                reported_pico_usd,
                tokens,
                calls,
            } => {
                let recorded: Vec<PricedCall> =
                    calls.into_iter().map(|c| priced(state, ctx, c)).collect();
                let model = recorded
                    .last()
                    .map(|c| c.call.model.clone())
                    .unwrap_or_else(|| ctx.model.clone().unwrap_or_default());
                let correction = CostCorrection {
                    reported_pico_usd,
                    reported_tokens: tokens,
                    recorded,
                }
                .as_call(&model);
                if let Some(row) = correction {
                    record(state, ctx, row, true).await;
                }
            }
            other => return Some(other),
        }
        None
    }
}

/// Records a call of the run as it is sent, with `estimate` (tokens
/// estimated, never priced) until its answer is recorded in its place.
pub async fn record_call_sent(
    state: &AppState,
    ctx: &RunContext,
    mut estimate: ModelCall,
) -> Option<CallId> {
    estimate.estimated = true;
    let row = priced(state, ctx, estimate);
    record(state, ctx, row, false).await.map(|(id, _)| id)
}

/// Records the answer of a call: in place of what was recorded when it was
/// sent (`sent`), else as a call of its own. True when the run is over: this
/// call reached a limit of its task's budget (and the run's tree ended with
/// it), or it had ended already.
pub async fn record_call_answered(
    state: &AppState,
    ctx: &RunContext,
    sent: Option<CallId>,
    call: ModelCall,
) -> bool {
    let row = priced(state, ctx, call);
    let recorded = match sent {
        Some(id) => match state.store.answer_model_call(id, Some(row)).await {
            Ok((run, _, events)) => Some((run, events)),
            Err(e) => {
                warn!(run_id = %ctx.run_id, error = %e, "cannot record a model call's answer");
                None
            }
        },
        None => record(state, ctx, row, true).await.map(|(_, ended)| ended),
    };
    recorded.is_some_and(|(run, events)| ends_run(&run, &events))
}

/// Takes back a call recorded when it was sent that its API refused
/// without billing it (an error status).
pub async fn withdraw_call(state: &AppState, ctx: &RunContext, sent: Option<CallId>) {
    if let Some(id) = sent
        && let Err(e) = state.store.answer_model_call(id, None).await
    {
        warn!(run_id = %ctx.run_id, error = %e, "cannot take back a refused model call");
    }
}

/// Records `row`: its ledger id, and the run and events the write left.
async fn record(
    state: &AppState,
    ctx: &RunContext,
    row: PricedCall,
    answered: bool,
) -> Option<(CallId, (Run, Vec<Event>))> {
    match state
        .store
        .record_model_call(ctx.run_id, ctx.provider.name.clone(), row, answered)
        .await
    {
        Ok((run, _, events, id)) => Some((id, (run, events))),
        Err(e) => {
            warn!(run_id = %ctx.run_id, error = %e, "cannot record a model call");
            None
        }
    }
}

/// Whether a write left the run over: ended already, or stopped by the
/// budget's check of this call.
fn ends_run(run: &Run, events: &[Event]) -> bool {
    run.state == RunState::Finished || events.iter().any(|e| e.kind == EventKind::BudgetExceeded)
}

/// `call` priced as its run's provider's: a call that names no model is the
/// run's model's.
fn priced(state: &AppState, ctx: &RunContext, mut call: ModelCall) -> PricedCall {
    if call.model.is_empty() {
        call.model = ctx.model.clone().unwrap_or_default();
    }
    PricedCall::of(call, ctx.provider.name.as_str(), &state.prices)
}
