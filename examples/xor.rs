//! Learn XOR with a 2-8-2 MLP (tanh), trained by Adam on the CPU target through the grad pass.
//!
//! `cargo run --release --example xor` prints the loss as it trains, then the
//! four predictions and a last line `accuracy 1.00`.

#[path = "training/mod.rs"]
mod training;

use rustral::frontend::ParamStore;
use rustral::prelude::*;
use rustral::train::{Optimizer, Schedule, Trainer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes = [2, 8, 2];
    let (train, infer) = training::graphs(&sizes);
    let options = CompileOptions { threads: 1, ..CompileOptions::default() };
    let params = ParamStore::init(&train.params, 0);
    let mut trainer =
        Trainer::new(&train, "loss", Target::Cpu, &options, Optimizer::adam(0.05), Schedule::Constant, params)?;
    let x = HostTensor::f32(&[4, 2], &[0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]).expect("4 x 2 values");
    let labels = [0usize, 1, 1, 0];
    let y = HostTensor::new(DType::I64, &[4], labels.iter().map(|&l| l as f64).collect()).expect("4 labels");
    let steps = 300;
    let bar = training::progress(steps);
    for _ in 0..steps {
        let loss = trainer.step(&[("x", x.clone()), ("y", y.clone())])?;
        bar.set_message(format!("{loss:.4}"));
        bar.inc(1);
    }
    bar.finish();
    let mut session = Session::compile(&infer.graph, Target::Cpu, &options)?;
    session.bind(trainer.params()?)?;
    let logits = session.run(&[("x", x)])?.remove(0).1;
    for (r, l) in logits.to_vec().chunks(2).enumerate() {
        println!("{:?} -> {}", [r / 2, r % 2], if l[1] > l[0] { 1 } else { 0 });
    }
    println!("accuracy {:.2}", training::accuracy(&logits, &labels));
    Ok(())
}
