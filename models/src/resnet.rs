//! ResNet as Hugging Face's `ResNetModel` computes it: a 7x7 stride-2 stem with batch norm and
//! a 3x3 stride-2 max pool, stages of basic (two 3x3) or bottleneck (1x1, 3x3, 1x1) residual
//! layers with 1x1 projection shortcuts where the shape changes, and a global average pool.
//! Convolutions have no bias (batch norm follows each); batch norm uses running statistics.

use crate::config::{self, ConfigError, Key};
use rustral_frontend::nn::{Activation, BatchNorm2d, Conv2d, MaxPool2d, Module, global_avg_pool};
use rustral_frontend::{DType, Dim, ForwardCtx, Result, Tensor};
use serde::Deserialize;
use std::path::Path;

/// PyTorch's `nn.BatchNorm2d` default, which `ResNetModel` keeps.
const BATCH_NORM_EPS: f64 = 1e-5;

/// The fields of a Hugging Face ResNet `config.json` that the model uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ResNetConfig {
    /// Image channels.
    #[serde(default = "three")]
    pub num_channels: usize,
    /// Channels after the stem.
    pub embedding_size: usize,
    /// Output channels of each stage.
    pub hidden_sizes: Vec<usize>,
    /// Layers per stage.
    pub depths: Vec<usize>,
    /// `basic` or `bottleneck`.
    pub layer_type: String,
    /// Activation after each convolution block (`relu`).
    #[serde(default = "relu")]
    pub hidden_act: String,
    /// Whether the first stage halves the resolution.
    #[serde(default)]
    pub downsample_in_first_stage: bool,
    /// Whether a bottleneck strides in its first 1x1 convolution rather than its 3x3.
    #[serde(default)]
    pub downsample_in_bottleneck: bool,
}

fn three() -> usize {
    3
}

fn relu() -> String {
    "relu".into()
}

const RESNET_KEYS: &[Key] =
    &[Key { name: "layer_type", supported: |v| v == "basic" || v == "bottleneck", expected: "basic or bottleneck" }];

/// A bottleneck's inner width is its output width over this (`ResNetBottleNeckLayer`).
const REDUCTION: usize = 4;

impl ResNetConfig {
    /// Read a `config.json`.
    pub fn from_file(path: &Path) -> Result<ResNetConfig, ConfigError> {
        config::read(path, RESNET_KEYS, ResNetConfig::validate)
    }

    /// The first problem that would make this config fail to trace or compute nonsense.
    pub fn validate(&self) -> std::result::Result<(), String> {
        config::size("num_channels", self.num_channels)?;
        config::size("embedding_size", self.embedding_size)?;
        if self.hidden_sizes.is_empty() || self.hidden_sizes.len() != self.depths.len() {
            return Err(format!(
                "hidden_sizes ({}) and depths ({}) must give one value per stage, at least one stage",
                self.hidden_sizes.len(),
                self.depths.len()
            ));
        }
        for (i, (&h, &d)) in self.hidden_sizes.iter().zip(&self.depths).enumerate() {
            config::size(&format!("hidden_sizes[{i}]"), h)?;
            config::layers(&format!("depths[{i}]"), d)?;
            if d == 0 {
                return Err(format!("depths[{i}] is 0: a stage has at least one layer"));
            }
            if self.layer_type == "bottleneck" && h < REDUCTION {
                return Err(format!("hidden_sizes[{i}] is {h}: a bottleneck needs at least {REDUCTION} channels"));
            }
        }
        if Activation::from_hf(&self.hidden_act).is_none() {
            return Err(format!("hidden_act {:?} is not supported (relu, gelu, gelu_new, silu)", self.hidden_act));
        }
        Ok(())
    }

    /// ResNet-18's shape (basic layers, 64 to 512 channels, two layers a stage).
    pub fn resnet18() -> ResNetConfig {
        ResNetConfig {
            num_channels: 3,
            embedding_size: 64,
            hidden_sizes: vec![64, 128, 256, 512],
            depths: vec![2, 2, 2, 2],
            layer_type: "basic".into(),
            hidden_act: "relu".into(),
            downsample_in_first_stage: false,
            downsample_in_bottleneck: false,
        }
    }

    /// A small config for tests.
    pub fn tiny() -> ResNetConfig {
        ResNetConfig { embedding_size: 8, hidden_sizes: vec![8, 16], depths: vec![1, 1], ..ResNetConfig::resnet18() }
    }
}

/// ResNet with parameters named as in `ResNetModel` checkpoints, for images of a static size.
#[derive(Clone, Debug)]
pub struct ResNet {
    /// Its config.
    pub config: ResNetConfig,
}

/// Checkpoint entries the model does not read: batch norm's update counters.
pub const RESNET_UNUSED_WEIGHTS: &[&str] = &["*.num_batches_tracked"];

/// The image height and width a trace uses: the pinned `height` and `width` dims, else
/// `default` (a convolution's output size needs static spatial dims).
pub fn image_size(ctx: &ForwardCtx, default: usize) -> [usize; 2] {
    let pinned = &ctx.shape_policy().pinned;
    [pinned.get("height").copied().unwrap_or(default), pinned.get("width").copied().unwrap_or(default)]
}

impl ResNet {
    /// Declare `pixel_values: f32[batch, channels, height, width]` (224x224 unless the trace
    /// pins `height` and `width`).
    pub fn input(&self, ctx: &mut ForwardCtx) -> Result<Tensor> {
        let [h, w] = image_size(ctx, 224);
        let dims = [Dim::sym("batch"), Dim::fixed(self.config.num_channels), Dim::fixed(h), Dim::fixed(w)];
        ctx.input("pixel_values", &dims, DType::F32)
    }

    /// `last_hidden_state` `[batch, hidden_sizes[-1], h', w']` and `pooler_output`
    /// `[batch, hidden_sizes[-1], 1, 1]`.
    pub fn forward(&self, ctx: &mut ForwardCtx, pixels: &Tensor) -> Result<(Tensor, Tensor)> {
        let c = &self.config;
        c.validate().map_err(|m| config::invalid("resnet", m))?;
        let act = Activation::from_hf(&c.hidden_act).expect("validated");
        let stem = ConvLayer::new("embedder", c.num_channels, c.embedding_size, 7, 2, Some(act));
        let mut h = ctx.scope("embedder", |ctx| {
            let h = stem.forward(ctx, pixels)?;
            MaxPool2d::new(3, 2, 1).forward(ctx, &h)
        })?;
        let mut width = c.embedding_size;
        for (s, (&out, &depth)) in c.hidden_sizes.iter().zip(&c.depths).enumerate() {
            let stride = if s > 0 || c.downsample_in_first_stage { 2 } else { 1 };
            for l in 0..depth {
                let layer =
                    Layer { config: c, act, input: width, output: out, stride: if l == 0 { stride } else { 1 } };
                h = ctx.scope(&format!("encoder.stages.{s}.layers.{l}"), |ctx| layer.forward(ctx, &h))?;
                width = out;
            }
        }
        let pooled = ctx.scope("pooler", |_| global_avg_pool(&h))?;
        Ok((h, pooled))
    }
}

/// `ResNetConvLayer`: convolution (padding `kernel / 2`, no bias), batch norm, activation.
struct ConvLayer {
    name: String,
    conv: Conv2d,
    norm: BatchNorm2d,
    act: Option<Activation>,
}

impl ConvLayer {
    fn new(
        name: &str,
        input: usize,
        output: usize,
        kernel: usize,
        stride: usize,
        act: Option<Activation>,
    ) -> ConvLayer {
        ConvLayer {
            name: name.into(),
            conv: Conv2d::new("convolution", input, output, kernel).stride(stride).padding(kernel / 2).no_bias(),
            norm: BatchNorm2d::new("normalization", output, BATCH_NORM_EPS),
            act,
        }
    }

    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        ctx.scope(&self.name, |ctx| {
            let y = self.conv.forward(ctx, x)?;
            let y = self.norm.forward(ctx, &y)?;
            match self.act {
                Some(a) => a.apply(&y),
                None => Ok(y),
            }
        })
    }
}

/// One residual layer, basic or bottleneck, with its shortcut.
struct Layer<'a> {
    config: &'a ResNetConfig,
    act: Activation,
    input: usize,
    output: usize,
    stride: usize,
}

impl Layer<'_> {
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        let (i, o, s) = (self.input, self.output, self.stride);
        let convs = if self.config.layer_type == "bottleneck" {
            let r = o / REDUCTION;
            let (first, middle) = if self.config.downsample_in_bottleneck { (s, 1) } else { (1, s) };
            vec![
                ConvLayer::new("layer.0", i, r, 1, first, Some(self.act)),
                ConvLayer::new("layer.1", r, r, 3, middle, Some(self.act)),
                ConvLayer::new("layer.2", r, o, 1, 1, None),
            ]
        } else {
            vec![ConvLayer::new("layer.0", i, o, 3, s, Some(self.act)), ConvLayer::new("layer.1", o, o, 3, 1, None)]
        };
        let mut h = x.clone();
        for conv in &convs {
            h = conv.forward(ctx, &h)?;
        }
        let residual = if i != o || s != 1 {
            let shortcut = ConvLayer {
                name: "shortcut".into(),
                conv: Conv2d::new("convolution", i, o, 1).stride(s).no_bias(),
                norm: BatchNorm2d::new("normalization", o, BATCH_NORM_EPS),
                act: None,
            };
            shortcut.forward(ctx, x)?
        } else {
            x.clone()
        };
        self.act.apply(&h.add(&residual)?)
    }
}
