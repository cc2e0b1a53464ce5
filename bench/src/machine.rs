//! The machine a run measured on: its processor and how busy it was.
//!
//! Speed ratios between allocators depend on the processor, not only on its load: the same code
//! gave different ratios to talc on two machines that were both "AMD EPYC" by name
//! (`docs/measurements.md`, "a second machine"). So every report names the processor, with its
//! family and model, and the load average at its start and end.

use serde_json::{json, Value};

/// The processor, as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// The model name (`model name` in `/proc/cpuinfo`), or "unknown".
    pub name: String,
    /// The x86 family and model numbers, where the kernel gives them: the name alone does not
    /// tell processor generations apart ("AMD EPYC" on several).
    pub family_model: Option<(u32, u32)>,
}

impl Cpu {
    /// This machine's processor (Linux); "unknown" where `/proc/cpuinfo` cannot be read.
    pub fn this() -> Cpu {
        match std::fs::read_to_string("/proc/cpuinfo") {
            Ok(text) => Cpu::parse(&text),
            Err(_) => Cpu {
                name: "unknown".into(),
                family_model: None,
            },
        }
    }

    /// The processor described by `/proc/cpuinfo`'s text: its first processor's fields.
    pub fn parse(cpuinfo: &str) -> Cpu {
        let first = cpuinfo.split("\n\n").next().unwrap_or("");
        let field = |key: &str| {
            first.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        let number = |key: &str| field(key).and_then(|v| v.parse::<u32>().ok());
        Cpu {
            name: field("model name")
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            family_model: number("cpu family").zip(number("model")),
        }
    }

    /// For a report: "AMD EPYC (family 25, model 17)".
    pub fn describe(&self) -> String {
        match self.family_model {
            Some((f, m)) => format!("{} (family {f}, model {m})", self.name),
            None => self.name.clone(),
        }
    }
}

/// The load average over 1, 5 and 15 minutes as "0.21, 0.77, 0.61", or "unknown" where the
/// kernel does not report it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The logical processors this process may run on, or 0 where that cannot be read.
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// What a whole run reports about its machine.
pub struct Machine {
    cpu: Cpu,
    cpus: usize,
    load_start: String,
}

impl Machine {
    /// The machine now, at the start of a run.
    pub fn at_start() -> Machine {
        Machine {
            cpu: Cpu::this(),
            cpus: logical_cpus(),
            load_start: load_average(),
        }
    }

    /// The processor and how many logical processors the run had: "AMD EPYC (family 25,
    /// model 17), 2 logical processors". Also in the JSON, so that the tools which read it
    /// (`layouts.sh`, `ab.sh`) print the same words.
    pub fn processor(&self) -> String {
        match self.cpus {
            0 => format!("{}, logical processors unknown", self.cpu.describe()),
            n => format!("{}, {n} logical processors", self.cpu.describe()),
        }
    }

    /// The report's line: processor, logical processors, load at the start.
    pub fn describe(&self) -> String {
        format!(
            "{}; load average (1, 5, 15 min) {} at the start",
            self.processor(),
            self.load_start
        )
    }

    /// The JSON record, with the load average at the end taken now.
    pub fn json(&self) -> Value {
        json!({
            "cpu": self.cpu.name,
            "family": self.cpu.family_model.map(|f| f.0),
            "model": self.cpu.family_model.map(|f| f.1),
            "logical_cpus": self.cpus,
            "processor": self.processor(),
            "load_start": self.load_start,
            "load_end": load_average(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_gives_the_first_processors_name_family_and_model() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n\
                    model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 23\nmodel\t\t: 49\n\
                    model name\t: Other\n";
        let cpu = Cpu::parse(text);
        assert_eq!(cpu.name, "AMD EPYC");
        assert_eq!(cpu.family_model, Some((25, 17)));
        assert_eq!(cpu.describe(), "AMD EPYC (family 25, model 17)");
    }

    #[test]
    fn the_processor_line_names_the_count_or_says_it_is_unknown() {
        let cpu = Cpu::parse("cpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n");
        let machine = |cpus| Machine {
            cpu: cpu.clone(),
            cpus,
            load_start: "0.50, 0.40, 0.30".into(),
        };
        assert_eq!(
            machine(2).processor(),
            "AMD EPYC (family 25, model 17), 2 logical processors"
        );
        assert_eq!(
            machine(0).describe(),
            "AMD EPYC (family 25, model 17), logical processors unknown; load average \
             (1, 5, 15 min) 0.50, 0.40, 0.30 at the start"
        );
        assert_eq!(
            machine(2).json()["processor"],
            "AMD EPYC (family 25, model 17), 2 logical processors"
        );
    }

    #[test]
    fn a_cpuinfo_without_the_fields_is_unknown() {
        // An ARM kernel's cpuinfo has neither a model name nor a family.
        let cpu = Cpu::parse("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n");
        assert_eq!(cpu.describe(), "unknown");
        assert_eq!(Cpu::parse("").describe(), "unknown");
    }
}
