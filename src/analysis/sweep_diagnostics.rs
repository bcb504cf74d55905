//! The diagnostics of a sweep's final models, for its report: for each group (scheme, init and
//! depth) the first finished seed whose model loads is analysed on that run's validation data.

use super::comparison::ComparedRun;
use super::report::{analyze, AnalysisOptions};
use crate::data::SequenceMode;
use crate::run::load_run_model;
use crate::train::{group_name, validation_data, PairOutcome, Sweep, SweepRecord};
use crate::{device::parse_devices, error::Error};

/// What [`sweep_diagnostics`] reports as it goes.
#[derive(Debug)]
pub enum DiagnosticsProgress<'a> {
    /// The pair (`lns/seed-1`) being analysed.
    Analysing(&'a str),
    /// A pair whose model could not be read (say, damaged since it finished): skipped, and the
    /// group's next finished seed tried.
    Unreadable {
        /// The pair.
        pair: &'a str,
        /// Why.
        error: &'a Error,
    },
}

/// The diagnostics of each group's first finished seed whose model loads, on the sweep's first
/// device (4 batches, [`AnalysisOptions`]'s other defaults; sequences packed, as the diagnostics
/// average over positions that padding would dilute), labelled by group (`lns`, `layers-8/lns`)
/// and titled by pair and directory. A group without a readable finished model has none.
pub fn sweep_diagnostics(
    sweep: &Sweep,
    record: &SweepRecord,
    mut progress: impl FnMut(DiagnosticsProgress),
) -> Result<Vec<ComparedRun>, Error> {
    let device = parse_devices(&sweep.config.device)?.remove(0);
    let options = AnalysisOptions { batches: 4, ..AnalysisOptions::default() };
    let mut compared = Vec::new();
    for (layers, arm) in sweep.groups() {
        let group = group_name(layers, &arm);
        let finished = sweep.pairs().into_iter().filter(|p| {
            p.group() == group && matches!(record.outcomes.get(&p.key()), Some(PairOutcome::Finished { .. }))
        });
        for pair in finished {
            let key = pair.key();
            progress(DiagnosticsProgress::Analysing(&key));
            let model = match load_run_model(&pair.dir, None, &device) {
                Ok((model, _)) => model,
                Err(error) => {
                    progress(DiagnosticsProgress::Unreadable { pair: &key, error: &error });
                    continue;
                }
            };
            let data = validation_data(&{
                let mut config = sweep.pair_config(&pair);
                config.data.sequences = SequenceMode::Pack;
                config
            })?;
            let report = analyze(&model, &data, &options, &mut |_, _| {})?;
            let title = format!("{key} ({})", pair.dir.display());
            compared.push(ComparedRun { label: group.clone(), title, report });
            break;
        }
    }
    Ok(compared)
}
