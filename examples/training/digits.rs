//! The digits example's training, shared with the test that checks it learns.

use super::{Net, accuracy, net_graphs, progress};
use rustral::frontend::ParamStore;
use rustral::prelude::*;
use rustral::train::{DatasetRecord, Optimizer, RunManifest, Schedule, Trainer};
use std::path::Path;

/// Rows of pixels (scaled to [0, 1]) and labels from a `p0..p63,label` CSV.
pub fn read(path: &Path) -> Result<(Vec<f64>, Vec<usize>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<f64> = line
            .split(',')
            .map(|f| f.trim().parse::<f64>().map_err(|e| format!("{}:{}: {e}", path.display(), i + 1)))
            .collect::<Result<_, _>>()?;
        if fields.len() != 65 {
            return Err(format!("{}:{}: expected 65 fields, found {}", path.display(), i + 1, fields.len()));
        }
        pixels.extend(fields[..64].iter().map(|p| p / 16.0));
        labels.push(fields[64] as usize);
    }
    Ok((pixels, labels))
}

pub fn batch(pixels: &[f64], labels: &[usize], rows: &[usize]) -> (HostTensor, HostTensor) {
    let x: Vec<f64> = rows.iter().flat_map(|&r| pixels[r * 64..(r + 1) * 64].iter().copied()).collect();
    let y: Vec<f64> = rows.iter().map(|&r| labels[r] as f64).collect();
    (
        HostTensor::new(DType::F32, &[rows.len(), 64], x).expect("64 pixels a row"),
        HostTensor::new(DType::I64, &[rows.len()], y).expect("a label a row"),
    )
}

/// The MLP the `train_digits` example trains.
pub const MLP: Net<'static> = Net::Mlp(&[64, 128, 10]);
/// The CNN the `train_digits_cnn` example trains: 16 and 32 channels, 10 classes.
pub const CNN: Net<'static> = Net::Cnn(&[16, 32, 10]);

/// Train the MLP for `epochs` on the digits in `dir` on the CPU; returns the last test
/// accuracy and the run's manifest. With `show`, a progress bar and each epoch's test accuracy
/// on stderr.
pub fn train(dir: &Path, epochs: usize, show: bool) -> Result<(f64, RunManifest), Box<dyn std::error::Error>> {
    train_net(dir, MLP, Target::Cpu, epochs, show)
}

/// [`train`] for any network and target.
pub fn train_net(
    dir: &Path,
    net: Net,
    target: Target,
    epochs: usize,
    show: bool,
) -> Result<(f64, RunManifest), Box<dyn std::error::Error>> {
    train_ranked(dir, net, target, epochs, show, None)
}

/// [`train_net`] as one rank of `group` (a data-parallel run; `(group, bucket bytes)`), or as
/// the process's rank when an MPI launcher started it. Every rank steps through the same
/// global batches; the trainer takes its rows of each.
pub fn train_ranked(
    dir: &Path,
    net: Net,
    target: Target,
    epochs: usize,
    show: bool,
    group: Option<(rustral::runtime::collective::Collective, usize)>,
) -> Result<(f64, RunManifest), Box<dyn std::error::Error>> {
    let (train_x, train_y) = read(&dir.join("train.csv"))?;
    let (test_x, test_y) = read(&dir.join("test.csv"))?;
    let (train, infer) = net_graphs(net);
    let options = CompileOptions { threads: 1, ..CompileOptions::default() };
    let batch_size = 64;
    let per_epoch = train_y.len().div_ceil(batch_size);
    let total = epochs * per_epoch;
    let schedule = Schedule::WarmupCosine { warmup: per_epoch, total, min_factor: 0.05 };
    let params = ParamStore::init(&train.params, 0);
    let optimizer = Optimizer::adamw(0.01);
    let mut trainer = Trainer::new(&train, "loss", target.clone(), &options, optimizer, schedule, params)?;
    if let Some((comm, bucket_bytes)) = group {
        trainer = trainer.with_collective(comm, bucket_bytes)?;
    }
    let (name, config) = match net {
        Net::Mlp(sizes) => ("train_digits", serde_json::json!({ "layers": sizes, "activation": "tanh" })),
        Net::Cnn(widths) => ("train_digits_cnn", serde_json::json!({ "cnn_widths": widths, "activation": "relu" })),
    };
    let mut config = config;
    config["epochs"] = serde_json::json!(epochs);
    config["batch_size"] = serde_json::json!(batch_size);
    config["seed"] = serde_json::json!(0);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target_name = format!("{target:?}").to_lowercase();
    let mut manifest = RunManifest::new(name, &target_name, "O2", config, optimizer, schedule, root);
    manifest.dataset = vec![DatasetRecord::of(&dir.join("train.csv"))?, DatasetRecord::of(&dir.join("test.csv"))?];
    let start = std::time::Instant::now();
    let mut session = Session::compile(&infer.graph, target, &options)?;
    let all: Vec<usize> = (0..test_y.len()).collect();
    let (tx, _) = batch(&test_x, &test_y, &all);
    let mut order: Vec<usize> = (0..train_y.len()).collect();
    let bar = progress(total as u64);
    if !show {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut acc = 0.0;
    for epoch in 0..epochs {
        // A fixed shuffle per epoch (a linear congruential permutation), so runs repeat.
        order.sort_by_key(|&r| (r * 7919 + epoch * 104_729) % train_y.len());
        for rows in order.chunks(batch_size) {
            let (x, y) = batch(&train_x, &train_y, rows);
            let loss = trainer.step(&[("x", x), ("y", y)])?;
            manifest.step(loss, start.elapsed().as_secs_f64());
            bar.set_message(format!("{loss:.4}"));
            bar.inc(1);
        }
        session.bind(trainer.params()?)?;
        let logits = session.run(&[("x", tx.clone())])?.remove(0).1;
        acc = accuracy(&logits, &test_y);
        if show {
            bar.suspend(|| eprintln!("epoch {:>2}: test accuracy {acc:.3}", epoch + 1));
        }
    }
    bar.finish();
    manifest.config["test_accuracy"] = serde_json::json!(acc);
    manifest.record_parallel(&trainer);
    Ok((acc, manifest))
}
