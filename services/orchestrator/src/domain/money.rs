//! Money as Chorus keeps it: whole pico-dollars, exact for any price with up
//! to six decimals per million tokens (decision 0032), how people read it,
//! and the cost limits a caller may set.

use super::{DomainError, Usage};

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
