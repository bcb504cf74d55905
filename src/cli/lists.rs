//! The list options of the sweep's command line, parsed: `--schemes`, `--seeds`, `--layers`
//! (depths), `--inits` and `--baseline`. Each refuses an unknown item, one listed twice and an
//! empty list, naming its option.

use crate::config_error::ConfigError;
use crate::norm::{InitScheme, NormScheme};
use crate::train::{arm_name, Sweep};

/// The schemes of the paper's Table 1, in its order.
pub fn table_1_schemes() -> Vec<NormScheme> {
    ["post-ln", "deepnorm", "mix-ln", "pre-ln", "lns"].iter().map(|s| s.parse().expect("a known scheme")).collect()
}

/// Parses a comma-separated scheme list; `table-1` is the paper's Table 1 set and `all` every
/// scheme. An unknown scheme, a repeated one or an empty list is an error.
pub fn parse_schemes(list: &str) -> Result<Vec<NormScheme>, ConfigError> {
    let mut schemes: Vec<NormScheme> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let expanded = match item.to_ascii_lowercase().as_str() {
            "table-1" | "table1" => table_1_schemes(),
            "all" => NormScheme::defaults(),
            _ => vec![item.parse().map_err(|e| in_option("--schemes", e))?],
        };
        for scheme in expanded {
            push_once(&mut schemes, scheme, |s| format!("--schemes: `{s}` is listed twice"))?;
        }
    }
    if schemes.is_empty() {
        return Err(ConfigError::Conflict("--schemes is empty; give e.g. `pre-ln,lns`, `table-1` or `all`".into()));
    }
    Ok(schemes)
}

/// The most seeds one range of a seed list may hold (a guard against `1-100000`).
const MAX_SEED_RANGE: u64 = 1000;

/// Parses a seed list: comma-separated seeds and inclusive ranges, e.g. `1,2,5` or `1-3`.
pub fn parse_seeds(list: &str) -> Result<Vec<u64>, ConfigError> {
    let bad = |item: &str| {
        ConfigError::Conflict(format!("--seeds: `{item}` is not a seed or a range of seeds (e.g. `1,2,3` or `1-3`)"))
    };
    let mut seeds = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let range = match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) =
                    (a.trim().parse::<u64>().map_err(|_| bad(item))?, b.trim().parse::<u64>().map_err(|_| bad(item))?);
                if a > b {
                    return Err(ConfigError::Conflict(format!("--seeds: `{item}` runs backwards; write `{b}-{a}`")));
                }
                if b - a >= MAX_SEED_RANGE {
                    return Err(ConfigError::Conflict(format!(
                        "--seeds: `{item}` holds {} seeds, more than the {MAX_SEED_RANGE} a range may hold",
                        b as u128 - a as u128 + 1
                    )));
                }
                a..=b
            }
            None => {
                let seed = item.parse::<u64>().map_err(|_| bad(item))?;
                seed..=seed
            }
        };
        for seed in range {
            push_once(&mut seeds, seed, |s| format!("--seeds: seed {s} is listed twice"))?;
        }
    }
    if seeds.is_empty() {
        return Err(ConfigError::Conflict("--seeds is empty; give e.g. `1` or `1,2,3`".into()));
    }
    Ok(seeds)
}

/// Parses a depth list, `4,8,16`: each a number of layers of at least 1, none repeated.
pub fn parse_depths(list: &str) -> Result<Vec<usize>, ConfigError> {
    let mut depths = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let depth = item.parse::<usize>().ok().filter(|&d| d > 0).ok_or_else(|| {
            ConfigError::Conflict(format!("--layers: `{item}` is not a number of layers (at least 1); e.g. `4,8,16`"))
        })?;
        push_once(&mut depths, depth, |d| format!("--layers: depth {d} is listed twice"))?;
    }
    if depths.is_empty() {
        return Err(ConfigError::Conflict("--layers is empty; give e.g. `4,8,16`".into()));
    }
    Ok(depths)
}

/// Parses an init list, `normal,scaled`: each an [`InitScheme`], none repeated.
pub fn parse_inits(list: &str) -> Result<Vec<InitScheme>, ConfigError> {
    let mut inits = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let init = item.parse().map_err(|e| in_option("--inits", e))?;
        push_once(&mut inits, init, |i| format!("--inits: `{i}` is listed twice"))?;
    }
    if inits.is_empty() {
        return Err(ConfigError::Conflict(format!("--inits is empty; give some of {}", InitScheme::names())));
    }
    Ok(inits)
}

/// An item's own error (an unknown name, a bad argument), said as the option's.
fn in_option(option: &str, error: ConfigError) -> ConfigError {
    ConfigError::Conflict(format!("{option}: {error}"))
}

/// Appends `item`, or says (`twice`) that the list already holds it.
fn push_once<T: PartialEq>(list: &mut Vec<T>, item: T, twice: impl Fn(&T) -> String) -> Result<(), ConfigError> {
    if list.contains(&item) {
        return Err(ConfigError::Conflict(twice(&item)));
    }
    list.push(item);
    Ok(())
}

/// The arm (`pre-ln`, `pre-ln+scaled`) every other is paired with: `--baseline`'s, which must be
/// one of the sweep's, or Pre-LN (with the first init of an init axis that lacks `normal`).
pub fn parse_baseline(sweep: &Sweep, baseline: Option<&str>) -> Result<String, ConfigError> {
    // Each arm's directory name (`gpas-lns+scaled`) and the name --baseline takes (`gpas:lns+scaled`).
    let mut arms: Vec<(String, String)> = Vec::new();
    for pair in sweep.pairs() {
        let shown = match pair.init.filter(|&init| init != InitScheme::Normal) {
            Some(init) => format!("{}+{init}", pair.scheme),
            None => pair.scheme.to_string(),
        };
        if !arms.iter().any(|(arm, _)| *arm == pair.arm()) {
            arms.push((pair.arm(), shown));
        }
    }
    let Some(name) = baseline else {
        let init = sweep.inits.first().copied().filter(|_| !sweep.inits.contains(&InitScheme::Normal));
        return Ok(arm_name(&NormScheme::PreLn, init));
    };
    if name.trim().is_empty() {
        return Err(ConfigError::Conflict("--baseline is empty: name one of the sweep's schemes".into()));
    }
    // An arm as the report names it (`gpas-lns+scaled`) or as --schemes writes it.
    if let Some((arm, _)) = arms.iter().find(|(arm, shown)| arm == name || shown == name) {
        return Ok(arm.clone());
    }
    // `lns+scaled` is a scheme and an init; each part is parsed so that aliases (`pre`) work. The
    // init is after the last `+` when it names one: a scheme's number may hold a `+` (`completep:1e+1`).
    let (scheme, init) = match name.rsplit_once('+') {
        Some((scheme, init)) if init.parse::<InitScheme>().is_ok() || scheme.parse::<NormScheme>().is_ok() => {
            (scheme, Some(init))
        }
        _ => (name, None),
    };
    let with_option = |e: ConfigError| ConfigError::Conflict(format!("--baseline {name}: {e}"));
    let scheme: NormScheme = scheme.parse().map_err(with_option)?;
    let init = init.map(str::parse::<InitScheme>).transpose().map_err(with_option)?;
    let arm = arm_name(&scheme, init);
    if !arms.iter().any(|(known, _)| *known == arm) {
        let names: Vec<&str> = arms.iter().map(|(_, shown)| shown.as_str()).collect();
        return Err(ConfigError::Conflict(format!(
            "--baseline {name} is not one of the sweep's arms ({}); name one of them (`scheme+init` on an init \
             axis), or add it to --schemes",
            names.join(", ")
        )));
    }
    Ok(arm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::TrainConfig;

    fn sweep(schemes: &str, inits: &[InitScheme]) -> Sweep {
        let schemes = parse_schemes(schemes).unwrap();
        Sweep { config: TrainConfig::default(), schemes, seeds: vec![0], inits: inits.to_vec(), depths: vec![] }
    }

    #[test]
    fn an_unknown_item_is_said_as_its_options() {
        let err = parse_schemes("pre-ln,lnss").unwrap_err().to_string();
        assert!(err.starts_with("--schemes: unknown normalisation scheme `lnss`"), "{err}");
        let err = parse_schemes("mix-ln:x").unwrap_err().to_string();
        assert!(err.starts_with("--schemes: "), "{err}");
        let err = parse_inits("normal,scaeld").unwrap_err().to_string();
        assert!(err.starts_with("--inits: unknown init scheme `scaeld`"), "{err}");
    }

    #[test]
    fn a_baseline_splits_at_the_init_only_where_one_is_named() {
        // `1e+1` is CompleteP's number, not an init after a `+`.
        let with_exponent = sweep("lns,completep:1e+1", &[]);
        let arm = parse_baseline(&with_exponent, Some("completep:1e+1")).unwrap();
        assert_eq!(arm, arm_name(&"completep:10".parse().unwrap(), None));
        let with_init = sweep("lns,pre-ln", &[InitScheme::Normal, InitScheme::Scaled]);
        assert_eq!(parse_baseline(&with_init, Some("pre+scaled")).unwrap(), "pre-ln+scaled");
        // A scheme then a bad init is refused as an init.
        let bad_init = parse_baseline(&with_init, Some("pre-ln+scaledd")).unwrap_err();
        assert!(matches!(bad_init, ConfigError::Conflict(ref m) if m.contains("init")), "{bad_init}");
    }
}
