//! Which shard this process is (P-42): `--shard I/N`, or with `--shard
//! auto` the scheduler's own variables. Slurm's job arrays give
//! `SLURM_ARRAY_TASK_ID` and the array's bounds; Kubernetes' Indexed Jobs
//! give `JOB_COMPLETION_INDEX`, and the Job that `haul plan` writes sets
//! `HAUL_SHARDS` to its completions (Kubernetes does not export them).

use crate::plan::MAX_SHARDS;

/// A shard's index and the shard count, and where they came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assigned {
    pub index: u32,
    pub count: u32,
    pub from: &'static str,
}

fn number(what: &str, v: &str) -> Result<u32, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{what} is {v:?}, not a number"))
}

fn checked(index: u32, count: u32, from: &'static str) -> Result<Assigned, String> {
    if count == 0 || count > MAX_SHARDS {
        return Err(format!(
            "{from}: a transfer is split into 1 to {MAX_SHARDS} shards, not {count}"
        ));
    }
    if index >= count {
        return Err(format!(
            "{from}: shard {index} is out of range: a transfer of {count} shards has shards 0 to {}",
            count - 1
        ));
    }
    Ok(Assigned { index, count, from })
}

/// `I/N`, as `--shard` takes it.
pub fn parse(s: &str) -> Result<(u32, u32), String> {
    let (i, n) = s.split_once('/').ok_or_else(|| {
        format!("--shard takes INDEX/COUNT (0/4 is the first of 4) or auto, not {s:?}")
    })?;
    let a = checked(
        number("the shard index", i)?,
        number("the shard count", n)?,
        "--shard",
    )?;
    Ok((a.index, a.count))
}

/// The shard the scheduler started this process as, from its variables
/// (`get` reads one); `Ok(None)` where no scheduler's are set.
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Assigned>, String> {
    if let Some(id) = get("SLURM_ARRAY_TASK_ID") {
        let id = number("SLURM_ARRAY_TASK_ID", &id)?;
        let min = get("SLURM_ARRAY_TASK_MIN")
            .map(|v| number("SLURM_ARRAY_TASK_MIN", &v))
            .transpose()?
            .unwrap_or(0);
        let max = get("SLURM_ARRAY_TASK_MAX").ok_or(
            "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_MAX is not: give --shard INDEX/COUNT",
        )?;
        let max = number("SLURM_ARRAY_TASK_MAX", &max)?;
        if let Some(n) = get("SLURM_ARRAY_TASK_COUNT") {
            let n = number("SLURM_ARRAY_TASK_COUNT", &n)?;
            if max < min || n != max - min + 1 {
                return Err(format!(
                    "the job array runs {n} tasks between {min} and {max}: a stepped or sparse array does not number shards 0 to N-1; use --array={min}-{max}, or give --shard INDEX/COUNT"
                ));
            }
        }
        if id < min || max < min {
            return Err(format!(
                "SLURM_ARRAY_TASK_ID {id} lies outside the array's bounds {min} to {max}"
            ));
        }
        return checked(id - min, max - min + 1, "the Slurm job array").map(Some);
    }
    if let Some(i) = get("JOB_COMPLETION_INDEX") {
        let i = number("JOB_COMPLETION_INDEX", &i)?;
        let n = get("HAUL_SHARDS").ok_or(
            "JOB_COMPLETION_INDEX is set but HAUL_SHARDS is not: set it to the Job's completions (haul plan --emit kubernetes does), or give --shard INDEX/COUNT",
        )?;
        let n = number("HAUL_SHARDS", &n)?;
        return checked(i, n, "the Kubernetes Indexed Job").map(Some);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn flags_parse_and_are_bounded() {
        assert_eq!(parse("0/4"), Ok((0, 4)));
        assert_eq!(parse("3/4"), Ok((3, 4)));
        assert!(parse("4/4").unwrap_err().contains("out of range"));
        assert!(parse("0/0").is_err());
        assert!(parse("1").is_err());
        assert!(parse("a/4").is_err());
        assert!(parse(&format!("0/{}", MAX_SHARDS + 1)).is_err());
    }

    #[test]
    fn slurm_arrays_number_from_their_minimum() {
        let a = from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_MIN", "5"),
            ("SLURM_ARRAY_TASK_MAX", "8"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((a.index, a.count), (2, 4));
        let stepped = from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "6"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]));
        assert!(stepped.unwrap_err().contains("stepped or sparse"));
        assert!(from_env(env(&[("SLURM_ARRAY_TASK_ID", "1")])).is_err());
    }

    #[test]
    fn kubernetes_needs_the_count_beside_the_index() {
        let a = from_env(env(&[("JOB_COMPLETION_INDEX", "3"), ("HAUL_SHARDS", "8")]))
            .unwrap()
            .unwrap();
        assert_eq!((a.index, a.count), (3, 8));
        assert!(from_env(env(&[("JOB_COMPLETION_INDEX", "3")])).is_err());
        assert!(from_env(env(&[("JOB_COMPLETION_INDEX", "8"), ("HAUL_SHARDS", "8")])).is_err());
        assert_eq!(from_env(env(&[])), Ok(None));
    }
}
