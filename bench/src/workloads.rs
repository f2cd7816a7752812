//! The benchmark workloads, shared by the criterion benches and the ablation harness: single
//! ops at the shapes and two models. Each is traced with inference settings; symbolic
//! dims get their sizes from `sizes`.

use rustral_frontend::nn::cross_entropy as lm_loss;
use rustral_frontend::nn::{LayerNorm, Module, gelu};
use rustral_frontend::{DType, Dim, ForwardCtx, Init, Result, Tensor, TraceOptions, Traced, trace, trace_named};
use rustral_models::{Bert, BertConfig, Gpt2Config, ResNet, ResNetConfig, Vit, VitConfig};

/// An op or a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A single op (or a small fused chain).
    Op,
    /// A whole model.
    Model,
}

/// A named workload.
pub struct Workload {
    /// Short name (`layer_norm`, `minilm_l6`, ...): manifests and reports key on it.
    pub name: &'static str,
    /// Op or model.
    pub kind: Kind,
    /// What and at which shape, for reports.
    pub description: &'static str,
    /// The fusion pass that makes this op's fused form (op workloads), for the transfer table.
    pub fused_by: Option<&'static str>,
    /// Traces it.
    pub trace: fn() -> Traced,
    /// Sizes of its symbolic dims.
    pub sizes: &'static [(&'static str, usize)],
    /// Seconds a run at O0 (ResNet-18, ViT-B/16): measured when named (`--models`), left out
    /// of the default matrix, whose every pass set would take minutes each.
    pub heavy: bool,
}

/// Every workload, ops first.
pub fn all() -> Vec<Workload> {
    let op = |name, description, fused_by, trace| Workload {
        name,
        kind: Kind::Op,
        description,
        fused_by: Some(fused_by),
        trace,
        sizes: &[],
        heavy: false,
    };
    vec![
        op("layer_norm", "LayerNorm [8,128,768]", "fuse-layer-norm", layer_norm as fn() -> Traced),
        op("softmax", "softmax [8,12,128,128], last axis", "fuse-softmax", softmax),
        op("cross_entropy", "LM loss: cross-entropy of [8,128,8192] logits", "fuse-cross-entropy", cross_entropy),
        op("gelu_tanh", "GELU tanh [8,128,3072]", "fuse-gelu", gelu_tanh),
        op("attention", "causal attention [8,12,128,64]", "fuse-attention", attention),
        op("elementwise_chain", "tanh(0.75x + b) x + 0.5x^2, [8,128,3072]", "fuse-elementwise", elementwise_chain),
        op("gemm_1024", "matmul 1024x1024x1024 + bias + GELU", "fuse-matmul-epilogue", gemm_epilogue),
        Workload {
            name: "gpt2_block",
            kind: Kind::Model,
            description: "GPT-2-small block forward, batch 8 x seq 128",
            fused_by: None,
            trace: gpt2_block,
            sizes: &[],
            heavy: false,
        },
        Workload {
            name: "minilm_l6",
            kind: Kind::Model,
            description: "MiniLM-L6 forward + mean pooling, batch 8 x seq 128",
            fused_by: None,
            trace: minilm,
            sizes: &[("batch", 8), ("seq", 128)],
            heavy: false,
        },
        Workload {
            name: "resnet18",
            kind: Kind::Model,
            description: "ResNet-18 (HF ResNetModel) forward, batch 8, 224x224",
            fused_by: None,
            trace: resnet18,
            sizes: &[("batch", 8)],
            heavy: true,
        },
        Workload {
            name: "vit_b16",
            kind: Kind::Model,
            description: "ViT-B/16 (HF ViTModel) forward, batch 8, 224x224",
            fused_by: None,
            trace: vit_b16,
            sizes: &[("batch", 8)],
            heavy: true,
        },
        Workload {
            name: "patch_embed_conv",
            kind: Kind::Op,
            description: "ViT-B/16 patch embedding as conv2d (k16 s16, 3->768) + transpose, [8,3,224,224]",
            fused_by: None,
            trace: || patch_embed(true),
            sizes: &[],
            heavy: true,
        },
        Workload {
            name: "resnet_stem",
            kind: Kind::Op,
            description: "ResNet-18's stem: conv2d (k7 s2 p3, 3->64) + bias + ReLU, [8,3,224,224]",
            fused_by: None,
            trace: resnet_stem,
            sizes: &[],
            heavy: true,
        },
        Workload {
            name: "resnet_maxpool",
            kind: Kind::Op,
            description: "ResNet-18's max pooling after the stem: max_pool2d (k3 s2 p1), [8,64,112,112]",
            fused_by: None,
            trace: resnet_maxpool,
            sizes: &[],
            heavy: true,
        },
        Workload {
            name: "resnet_conv3x3_s0",
            kind: Kind::Op,
            description: "ResNet-18's first-stage convolution: conv2d (k3 s1 p1, 64->64) + bias + ReLU, [8,64,56,56]",
            fused_by: None,
            trace: || resnet_conv3x3(64, 56),
            sizes: &[],
            heavy: true,
        },
        Workload {
            name: "resnet_conv3x3_s3",
            kind: Kind::Op,
            description: "ResNet-18's last-stage convolution: conv2d (k3 s1 p1, 512->512) + bias + ReLU, [8,512,7,7]",
            fused_by: None,
            trace: || resnet_conv3x3(512, 7),
            sizes: &[],
            heavy: true,
        },
        Workload {
            name: "patch_embed_matmul",
            kind: Kind::Op,
            description: "ViT-B/16 patch embedding as reshape + permute + matmul + bias, [8,3,224,224]",
            fused_by: None,
            trace: || patch_embed(false),
            sizes: &[],
            heavy: true,
        },
    ]
}

/// The workloads a run without `--models` measures: all but the heavy ones.
pub fn defaults() -> Vec<Workload> {
    all().into_iter().filter(|w| !w.heavy).collect()
}

/// The workload called `name`.
pub fn by_name(name: &str) -> Option<Workload> {
    all().into_iter().find(|w| w.name == name)
}

fn input(ctx: &mut ForwardCtx, dims: &[usize]) -> Result<Tensor> {
    let dims: Vec<Dim> = dims.iter().map(|&d| Dim::fixed(d)).collect();
    ctx.input("x", &dims, DType::F32)
}

fn traced(f: impl FnOnce(&mut ForwardCtx) -> Result<Vec<Tensor>>) -> Traced {
    trace(TraceOptions::default(), f).expect("benchmark workloads trace")
}

/// LayerNorm [8,128,768] as the frontend traces it (primitives).
pub fn layer_norm() -> Traced {
    traced(|ctx| {
        let x = input(ctx, &[8, 128, 768])?;
        Ok(vec![LayerNorm::new("ln", 768, 1e-5).forward(ctx, &x)?])
    })
}

/// Softmax over the last axis of attention-score-shaped data.
pub fn softmax() -> Traced {
    traced(|ctx| Ok(vec![input(ctx, &[8, 12, 128, 128])?.softmax(-1)?]))
}

/// The mean cross-entropy of [8,128] rows of 8192-class logits against integer labels, as
/// `nn::cross_entropy` traces it (log-softmax and a one-hot pick).
pub fn cross_entropy() -> Traced {
    traced(|ctx| {
        let logits = input(ctx, &[8, 128, 8192])?;
        let labels = ctx.input("labels", &[Dim::fixed(8), Dim::fixed(128)], DType::I64)?;
        Ok(vec![lm_loss(ctx, &logits, &labels)?])
    })
}

/// GELU, tanh form, [8,128,3072].
pub fn gelu_tanh() -> Traced {
    traced(|ctx| Ok(vec![gelu(&input(ctx, &[8, 128, 3072])?, true)?]))
}

/// Inputs `q`, `k`, `v` of [8,12,128,head_dim] (batch, heads, sequence, head width).
fn heads(ctx: &mut ForwardCtx, head_dim: usize) -> Result<(Tensor, Tensor, Tensor)> {
    let dims = [Dim::fixed(8), Dim::fixed(12), Dim::fixed(128), Dim::fixed(head_dim)];
    Ok((ctx.input("q", &dims, DType::F32)?, ctx.input("k", &dims, DType::F32)?, ctx.input("v", &dims, DType::F32)?))
}

/// Causal attention `softmax(q k^T / 8 + causal) v` on [8,12,128,64] heads.
pub fn attention() -> Traced {
    traced(|ctx| {
        let (q, k, v) = heads(ctx, 64)?;
        let scores = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(0.125)?;
        let rows = ctx.iota(&[Dim::fixed(128), Dim::fixed(1)], 0, DType::I64)?;
        let cols = ctx.iota(&[Dim::fixed(1), Dim::fixed(128)], 1, DType::I64)?;
        let hidden = ctx.scalar(f64::from(f32::MIN), DType::F32)?;
        Ok(vec![cols.le(&rows)?.select(&scores, &hidden)?.softmax(-1)?.matmul(&v)?])
    })
}

/// MiniLM's attention alone: `softmax(q k^T / sqrt(32) + mask) v` on [8,12,128,32] heads with
/// a [8,1,1,128] additive padding mask (the fused kernel's mask-row path).
pub fn padded_attention() -> Traced {
    traced(|ctx| {
        let (q, k, v) = heads(ctx, 32)?;
        let mask = ctx.input("mask", &[Dim::fixed(8), Dim::fixed(1), Dim::fixed(1), Dim::fixed(128)], DType::F32)?;
        let scores = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(32f64.sqrt().recip())?.add(&mask)?;
        Ok(vec![scores.softmax(-1)?.matmul(&v)?])
    })
}

/// The head split of attention, [8,128,12,64] -> [8,12,128,64] (a permute that keeps the last
/// axis last: rows of 64 values copied).
pub fn head_split() -> Traced {
    traced(|ctx| {
        let x = ctx.input("x", &[Dim::fixed(8), Dim::fixed(128), Dim::fixed(12), Dim::fixed(64)], DType::F32)?;
        Ok(vec![x.permute(&[0, 2, 1, 3])?])
    })
}

/// `tanh(x * 0.75 + b) * x + 0.5 * x^2` with `b` a [3072] parameter: no named pattern, so the
/// passes make it one `fused_elementwise` with a row-broadcast operand.
pub fn elementwise_chain() -> Traced {
    traced(|ctx| {
        let x = input(ctx, &[8, 128, 3072])?;
        let b = ctx.param("b", &[Dim::fixed(3072)], Init::Normal { std: 0.1 })?;
        let t = x.mul_scalar(0.75)?.add(&b)?.tanh()?.mul(&x)?;
        Ok(vec![t.add(&x.square()?.mul_scalar(0.5)?)?])
    })
}

/// A 1024^3 matmul with a bias and GELU (the matmul-epilogue pattern).
pub fn gemm_epilogue() -> Traced {
    traced(|ctx| {
        let a = input(ctx, &[1024, 1024])?;
        let w = ctx.param("w", &[Dim::fixed(1024), Dim::fixed(1024)], Init::Normal { std: 0.03 })?;
        let b = ctx.param("b", &[Dim::fixed(1024)], Init::Zeros)?;
        Ok(vec![gelu(&a.matmul(&w)?.add(&b)?, true)?])
    })
}

/// A plain 1024^3 matmul of two inputs (the GEMM bar).
pub fn gemm(n: usize) -> Traced {
    traced(|ctx| {
        let a = ctx.input("a", &[Dim::fixed(n), Dim::fixed(n)], DType::F32)?;
        let b = ctx.input("b", &[Dim::fixed(n), Dim::fixed(n)], DType::F32)?;
        Ok(vec![a.matmul(&b)?])
    })
}

/// One GPT-2-small block (pre-LN, causal attention, GELU MLP), batch 8 x seq 128.
pub fn gpt2_block() -> Traced {
    let block = Gpt2Config::small(1).block().expect("GPT-2 small's activation is known");
    traced(|ctx| {
        let x = input(ctx, &[8, 128, 768])?;
        Ok(vec![ctx.scope("h.0", |ctx| block.forward(ctx, &x))?])
    })
}

/// MiniLM-L6 (all-MiniLM-L6-v2's config) with mean pooling; symbolic batch and seq.
pub fn minilm() -> Traced {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/minilm/model_files/config.json");
    let model = Bert { config: BertConfig::from_file(std::path::Path::new(path)).expect("MiniLM config") };
    trace_named(TraceOptions::default(), |ctx| {
        let (ids, types, mask) = model.inputs(ctx)?;
        let h = model.forward(ctx, &ids, &types, &mask)?;
        Ok(vec![("embeddings".into(), model.sentence_embedding(ctx, &h, &mask)?)])
    })
    .expect("MiniLM traces")
}

/// ResNet-18 (`ResNetModel` with microsoft/resnet-18's config) at 224x224; symbolic batch.
pub fn resnet18() -> Traced {
    let model = ResNet { config: ResNetConfig::resnet18() };
    trace_named(TraceOptions::default(), |ctx| {
        let pixels = model.input(ctx)?;
        let (hidden, pooled) = model.forward(ctx, &pixels)?;
        Ok(vec![("last_hidden_state".into(), hidden), ("pooler_output".into(), pooled)])
    })
    .expect("ResNet-18 traces")
}

/// ViT-B/16 (`ViTModel` with google/vit-base-patch16-224's config); symbolic batch.
pub fn vit_b16() -> Traced {
    let model = Vit { config: VitConfig::base_patch16() };
    trace_named(TraceOptions::default(), |ctx| {
        let pixels = model.input(ctx)?;
        let (hidden, pooled) = model.forward(ctx, &pixels)?;
        Ok(vec![("last_hidden_state".into(), hidden), ("pooler_output".into(), pooled)])
    })
    .expect("ViT-B/16 traces")
}

/// ResNet-18's stem convolution with its (folded) batch norm as a bias and the ReLU: the
/// product with the fewest input channels (a contraction of 147) and a stride of 2.
pub fn resnet_stem() -> Traced {
    traced(|ctx| {
        let x = input(ctx, &[8, 3, 224, 224])?;
        let w = ctx.param("weight", &[64, 3, 7, 7].map(Dim::fixed), Init::Normal { std: 0.05 })?;
        let b = ctx.param("bias", &[Dim::fixed(64)], Init::Normal { std: 0.1 })?;
        let window = rustral_frontend::Window::default().stride(2).padding(3);
        Ok(vec![x.conv2d(&w, Some(&b), window, 1)?.relu()?])
    })
}

/// ResNet-18's max pooling after the stem: 3x3, stride 2, padding 1, on the stem's output.
pub fn resnet_maxpool() -> Traced {
    traced(|ctx| {
        let x = input(ctx, &[8, 64, 112, 112])?;
        Ok(vec![x.max_pool2d([3, 3], rustral_frontend::Window::default().stride(2).padding(1))?])
    })
}

/// A 3x3 stride-1 convolution of `channels` to as many, padding 1, with a bias and a ReLU, on
/// `[8, channels, size, size]`: ResNet-18's basic-block convolution at one stage's size.
pub fn resnet_conv3x3(channels: usize, size: usize) -> Traced {
    traced(|ctx| {
        let x = input(ctx, &[8, channels, size, size])?;
        let w = ctx.param("weight", &[channels, channels, 3, 3].map(Dim::fixed), Init::Normal { std: 0.05 })?;
        let b = ctx.param("bias", &[Dim::fixed(channels)], Init::Normal { std: 0.1 })?;
        let window = rustral_frontend::Window::default().padding(1);
        Ok(vec![x.conv2d(&w, Some(&b), window, 1)?.relu()?])
    })
}

/// ViT-B/16's patch embedding of `[8, 3, 224, 224]` into `[8, 196, 768]`, as the convolution
/// checkpoints describe (`conv`) or as its patches cut out by reshape and permute and one matmul.
pub fn patch_embed(conv: bool) -> Traced {
    traced(|ctx| {
        let x = input(ctx, &[8, 3, 224, 224])?;
        let w = ctx.param("weight", &[768, 3, 16, 16].map(Dim::fixed), Init::Normal { std: 0.02 })?;
        let b = ctx.param("bias", &[Dim::fixed(768)], Init::Zeros)?;
        let fixed = |d: &[usize]| d.iter().map(|&n| Dim::fixed(n)).collect::<Vec<_>>();
        if conv {
            let window = rustral_frontend::Window::default().stride(16);
            let y = x.conv2d(&w, Some(&b), window, 1)?;
            Ok(vec![y.reshape(&fixed(&[8, 768, 196]))?.transpose(1, 2)?])
        } else {
            let patches = x.reshape(&fixed(&[8, 3, 14, 16, 14, 16]))?.permute(&[0, 2, 4, 1, 3, 5])?;
            let rows = patches.reshape(&fixed(&[8, 196, 768]))?;
            let wt = w.reshape(&fixed(&[768, 768]))?.transpose(0, 1)?;
            Ok(vec![rows.matmul(&wt)?.add(&b)?])
        }
    })
}
