//! Writes DOT pictures of a 1-layer GPT-2 block before and after O2 (fused ops filled orange),
//! for the README: `cargo run -p rustral-passes --example fusion_dot -- OUT_DIR`, then
//! `dot -Tsvg OUT_DIR/gpt2_O2.dot -o gpt2_O2.svg`.

use rustral_frontend::{TraceOptions, trace};
use rustral_models::{Gpt2, Gpt2Config};
use rustral_passes::{OptLevel, PassManager};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    let model = Gpt2 { config: Gpt2Config::tiny(1) };
    let traced = trace(TraceOptions { name: "gpt2_block".into(), ..TraceOptions::default() }, |ctx| {
        let ids = model.input(ctx)?;
        Ok(vec![model.forward(ctx, &ids)?])
    })?;
    let mut g = traced.graph.clone();
    std::fs::write(out.join("gpt2_O0.dot"), rustral_ir::to_dot(&g))?;
    let compiled = PassManager::new(OptLevel::O2).run(&mut g)?;
    std::fs::write(out.join("gpt2_O2.dot"), rustral_ir::to_dot(&g))?;
    eprintln!("{:?}", compiled.stats.fused);
    Ok(())
}
