//! A report's files: `report.json`, `layers.csv`, `angular_distance.csv`, `tracking.csv`, the PNG
//! figures and `summary.md`, written into a directory that appears whole or not at all.

use std::path::Path;

use super::figures::write_report_figures;
use super::report::Report;
use crate::run::REPORT;

impl Report {
    /// Writes the report into `dir`, which appears whole or not at all: `report.json`,
    /// `layers.csv`, `angular_distance.csv`, `summary.md`, the PNG figures, and `tracking.csv`
    /// when the report holds training records.
    pub fn write(&self, dir: &Path, title: &str) -> std::io::Result<()> {
        crate::io::write_dir_atomically(dir, REPORT, |tmp| self.write_into(tmp, title).map(drop))
    }

    /// Writes the report's files into the existing directory `dir`; returns the figures' names.
    pub fn write_into(&self, dir: &Path, title: &str) -> std::io::Result<Vec<String>> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(REPORT), json)?;
        std::fs::write(dir.join("layers.csv"), self.layers_csv())?;
        let mut angular = String::from("layer,n,distance,normalized\n");
        for (l, (row, normalized)) in self.angular_distance.iter().zip(&self.angular_distance_normalized).enumerate() {
            for (n, (d, norm)) in row.iter().zip(normalized).enumerate() {
                angular.push_str(&format!("{l},{},{d},{norm}\n", n + 1));
            }
        }
        std::fs::write(dir.join("angular_distance.csv"), angular)?;
        if let Some(records) = &self.tracking {
            let mut csv = String::from(
                "step,layer,block_output_variance,after_attention_variance,grad_norm,max_abs_activation\n",
            );
            for r in records {
                for (l, variance) in r.block_output_variance.iter().enumerate() {
                    let per_block = |values: &[f64]| {
                        l.checked_sub(1).and_then(|i| values.get(i)).map(f64::to_string).unwrap_or_default()
                    };
                    let (after, grad) = (per_block(&r.after_attention_variance), per_block(&r.grad_norm));
                    let max = r.max_abs_activation.get(l).map(f64::to_string).unwrap_or_default();
                    csv.push_str(&format!("{},{l},{variance},{after},{grad},{max}\n", r.step));
                }
            }
            std::fs::write(dir.join("tracking.csv"), csv)?;
        }
        let figures = write_report_figures(self, dir)?;
        std::fs::write(dir.join("summary.md"), self.summary_with_figures(title, &figures))?;
        Ok(figures)
    }

    fn layers_csv(&self) -> String {
        let mut csv = String::from(
            "layer,block_output_variance,after_attention_variance,identity_ratio,pruning_drop,block_influence,\
             logit_lens_loss,logit_lens_kl,max_abs_activation\n",
        );
        let at = |values: &[f64], i: usize| values.get(i).map(f64::to_string).unwrap_or_default();
        csv.push_str(&format!(
            "0,{},,,,,{},{},{}\n",
            self.block_output_variance[0],
            at(&self.logit_lens_loss, 0),
            at(&self.logit_lens_kl, 0),
            at(&self.max_abs_activation, 0)
        ));
        for l in 1..=self.n_layers {
            let drop = self.drop_of(l).map(|d| d.to_string()).unwrap_or_default();
            csv.push_str(&format!(
                "{l},{},{},{},{drop},{},{},{},{}\n",
                self.block_output_variance[l],
                self.after_attention_variance[l - 1],
                self.identity_ratio[l - 1],
                at(&self.block_influence, l - 1),
                at(&self.logit_lens_loss, l),
                at(&self.logit_lens_kl, l),
                at(&self.max_abs_activation, l),
            ));
        }
        csv
    }
}
