//! The policy key a record's summary gives: the key its entry goes under,
//! and by which records pool and the ledger groups them.
use policy::{DeviceClass, HostClass, PolicyKey};

use super::Refusal;
use crate::analysis::summary::Summary;

/// The record's policy key, or the refusal that says which part is missing.
pub fn record_key(s: &Summary) -> Result<PolicyKey, Refusal> {
    let missing = || Refusal::Key(s.key_problem.clone().unwrap_or_else(|| "missing".into()));
    let (Some(device), Some(quant), Some(host), Some(model)) =
        (&s.device_class, &s.target_quant, &s.host_class, &s.model)
    else {
        return Err(missing());
    };
    let device = DeviceClass::parse(device).map_err(Refusal::Key)?;
    let host = HostClass::parse(host).map_err(Refusal::Key)?;
    let threads = match (device.is_cpu(), s.threads) {
        (true, Some(t)) => Some(t),
        (true, None) => return Err(Refusal::Key("the arms report no thread count".into())),
        (false, _) => None,
    };
    Ok(PolicyKey { drafter: s.drafter, device, host, quant: quant.clone(), model: model.clone(), threads })
}
