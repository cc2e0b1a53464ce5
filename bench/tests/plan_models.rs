//! The nine CNNs that ship with the `onnx` package, converted by `tools/onnx2plan` (in file
//! order, and with `--streams 2`), planned by `tagalloc::plan::solve`, and each plan checked
//! twice: by `check_layout`, and by executing its schedule on real memory (every producer
//! writes its buffer's pattern, every consumer verifies it) in four topological orders. The
//! benchmark tool's `plan --out` file is checked too: an `id,offset` line per ONNX value.

use std::path::{Path, PathBuf};
use std::process::Command;

use tagalloc::plan::{check_layout, solve, SolveOptions};
use tagalloc_bench::plan_file;

const MODELS: [&str; 9] = [
    "resnet50",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "bvlc_alexnet",
    "zfnet512",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The folder of the `onnx` package's light models.
fn light_models() -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            "import onnx, os; print(os.path.dirname(onnx.__file__))",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3 cannot import onnx (pip install -r tools/onnx2plan/requirements.txt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("backend/test/data/light")
}

fn convert(model: &Path, out: &Path, streams: Option<u32>) {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("tools/onnx2plan/onnx2plan.py"))
        .arg(model)
        .arg("--out")
        .arg(out);
    if let Some(n) = streams {
        cmd.args(["--streams", &n.to_string()]);
    }
    let o = cmd.output().expect("python3 runs");
    assert!(
        o.status.success(),
        "onnx2plan {} failed: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
#[cfg_attr(
    not(tagalloc_onnx),
    ignore = "needs python3 with the onnx package (pip install -r tools/onnx2plan/requirements.txt; \
              absent when built: touch bench/build.rs after installing it)"
)]
fn every_converted_cnn_plans_checks_and_runs() {
    let light = light_models();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plan-models");
    std::fs::create_dir_all(&dir).unwrap();
    for name in MODELS {
        let model = light.join(format!("light_{name}.onnx"));
        for streams in [None, Some(2)] {
            let file = dir.join(match streams {
                None => format!("{name}.json"),
                Some(n) => format!("{name}.s{n}.json"),
            });
            convert(&model, &file, streams);
            let loaded = plan_file::load(&file).unwrap_or_else(|e| panic!("{e}"));
            let solved = solve(&loaded.problem, &SolveOptions::default(), &mut || false)
                .unwrap_or_else(|e| panic!("{name}: {}", loaded.describe(e)));
            check_layout(&loaded.problem, &solved.layout)
                .unwrap_or_else(|e| panic!("{name}: {}", loaded.describe(e)));
            tagalloc_tests::plan_exec::execute(&loaded.problem, &solved.layout, 4)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(solved.layout.total() >= solved.lower_bound);
            // The converter found views and in-place outputs.
            assert!(
                loaded.problem.items.iter().any(|i| i.alias.is_some()),
                "{name}: no alias"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(tagalloc_onnx),
    ignore = "needs python3 with the onnx package (pip install -r tools/onnx2plan/requirements.txt; \
              absent when built: touch bench/build.rs after installing it)"
)]
fn the_plan_file_names_every_onnx_value() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plan-file");
    std::fs::create_dir_all(&dir).unwrap();
    let problem = dir.join("squeezenet.json");
    convert(
        &light_models().join("light_squeezenet.onnx"),
        &problem,
        None,
    );
    let csv = dir.join("plan.csv");
    let o = Command::new(env!("CARGO_BIN_EXE_tagalloc-bench"))
        .args(["plan", "--budget", "1"])
        .arg(&problem)
        .arg("--out")
        .arg(&csv)
        .output()
        .expect("the benchmark binary runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let loaded = plan_file::load(&problem).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,offset"));
    let mut offsets = Vec::new();
    let mut arena = None;
    for line in lines {
        if let Some(a) = line.strip_prefix("# arena ") {
            arena = Some(a.parse::<u64>().unwrap());
            continue;
        }
        let (id, offset) = line.rsplit_once(',').unwrap();
        offsets.push((id.to_string(), offset.parse::<u64>().unwrap()));
    }
    let ids: Vec<String> = offsets.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, loaded.ids);
    let layout = tagalloc::plan::Layout {
        spaces: vec![0; ids.len()],
        offsets: offsets.iter().map(|&(_, o)| o).collect(),
        arenas: vec![arena.expect("an arena line")],
    };
    check_layout(&loaded.problem, &layout).unwrap_or_else(|e| panic!("{}", loaded.describe(e)));
}
