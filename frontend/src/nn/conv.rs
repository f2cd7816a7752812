//! Convolutional layers over `[batch, channels, height, width]` images: convolution, batch
//! norm, pooling. Parameters are named as PyTorch names them (`weight`, `bias`,
//! `running_mean`, `running_var`), so torchvision and Hugging Face checkpoints load as they are.

use super::Module;
use crate::{Dim, ForwardCtx, Init, Result, Tensor, Window};

/// `nn.Conv2d`: a 2-D convolution with a `weight: [out, in / groups, kh, kw]` and an optional
/// `bias: [out]`.
#[derive(Clone, Debug)]
pub struct Conv2d {
    /// Scope name (`convolution`, `conv1`).
    pub name: String,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Kernel size (height, width).
    pub kernel: [usize; 2],
    /// Stride, padding and dilation.
    pub window: Window,
    /// Channel groups (`in_channels` for a depthwise convolution).
    pub groups: usize,
    /// Whether there is a `bias` parameter.
    pub bias: bool,
}

impl Conv2d {
    /// A square `kernel` x `kernel` convolution with a bias, stride 1 and no padding.
    pub fn new(name: &str, in_channels: usize, out_channels: usize, kernel: usize) -> Conv2d {
        Conv2d {
            name: name.into(),
            in_channels,
            out_channels,
            kernel: [kernel, kernel],
            window: Window::default(),
            groups: 1,
            bias: true,
        }
    }

    /// The same stride along both axes.
    pub fn stride(mut self, s: usize) -> Conv2d {
        self.window = self.window.stride(s);
        self
    }

    /// The same zero padding along both axes.
    pub fn padding(mut self, p: usize) -> Conv2d {
        self.window = self.window.padding(p);
        self
    }

    /// Without a bias (a convolution followed by batch norm has none).
    pub fn no_bias(mut self) -> Conv2d {
        self.bias = false;
        self
    }

    /// Channel groups.
    pub fn groups(mut self, g: usize) -> Conv2d {
        self.groups = g;
        self
    }
}

impl Module for Conv2d {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let per_group = self.in_channels / self.groups.max(1);
                let fan_in = per_group * self.kernel[0] * self.kernel[1];
                // He initialisation for the ReLU networks convolutions usually sit in.
                let init = Init::Normal { std: (2.0 / fan_in.max(1) as f64).sqrt() };
                let dims = [self.out_channels, per_group, self.kernel[0], self.kernel[1]].map(Dim::fixed);
                let w = ctx.param("weight", &dims, init)?;
                let b = if self.bias {
                    Some(ctx.param("bias", &[Dim::fixed(self.out_channels)], Init::Zeros)?)
                } else {
                    None
                };
                x.conv2d(&w, b.as_ref(), self.window, self.groups)
            })
        })
    }
}

/// `nn.BatchNorm2d`, traced as primitives over `[1, channels, 1, 1]` views of its four
/// parameters. At inference each channel is normalised by its running statistics,
/// `(x - running_mean) / sqrt(running_var + eps) * weight + bias`. In training mode
/// ([`crate::Mode::Train`]) by the batch's (mean and biased variance over batch, height and
/// width), and the running statistics move as PyTorch's do, `(1 - momentum) * running +
/// momentum * batch` with the unbiased variance, written through
/// [`ForwardCtx::update_param`]: the statistics are parameters like any other, and their
/// update is outputs of the graph, not hidden state.
#[derive(Clone, Debug)]
pub struct BatchNorm2d {
    /// Scope name (`normalization`, `bn1`).
    pub name: String,
    /// Channels.
    pub channels: usize,
    /// Added to the variance.
    pub eps: f64,
    /// Weight of the batch's statistics in the running ones (PyTorch's 0.1).
    pub momentum: f64,
}

impl BatchNorm2d {
    /// A batch norm over `channels` channels, momentum 0.1.
    pub fn new(name: &str, channels: usize, eps: f64) -> BatchNorm2d {
        BatchNorm2d { name: name.into(), channels, eps, momentum: 0.1 }
    }
}

impl Module for BatchNorm2d {
    #[track_caller]
    fn forward(&self, ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        super::called_here(|| -> Result<Tensor> {
            ctx.scope(&self.name, |ctx| {
                let c = [Dim::fixed(self.channels)];
                let view = [Dim::fixed(1), Dim::fixed(self.channels), Dim::fixed(1), Dim::fixed(1)];
                let weight = ctx.param("weight", &c, Init::Ones)?.reshape(&view)?;
                let bias = ctx.param("bias", &c, Init::Zeros)?.reshape(&view)?;
                let running_mean = ctx.param("running_mean", &c, Init::Zeros)?;
                let running_var = ctx.param("running_var", &c, Init::Ones)?;
                let (mean, var) = if ctx.mode() == crate::Mode::Train {
                    let mean = x.mean(&[0, 2, 3], true)?;
                    let var = x.sub(&mean)?.square()?.mean(&[0, 2, 3], true)?;
                    let unbiased = var.mul(&unbiased_factor(x)?)?;
                    let m = self.momentum;
                    let blend = |running: &Tensor, batch: &Tensor| -> Result<Tensor> {
                        running.mul_scalar(1.0 - m)?.add(&batch.reshape(&c)?.mul_scalar(m)?)
                    };
                    let (new_mean, new_var) = (blend(&running_mean, &mean)?, blend(&running_var, &unbiased)?);
                    ctx.update_param("running_mean", &new_mean)?;
                    ctx.update_param("running_var", &new_var)?;
                    (mean, var)
                } else {
                    (running_mean.reshape(&view)?, running_var.reshape(&view)?)
                };
                let inv = var.add_scalar(self.eps)?.rsqrt()?;
                x.sub(&mean)?.mul(&inv)?.mul(&weight)?.add(&bias)
            })
        })
    }
}

/// `n / (n - 1)` for the `n` values a batch norm averages per channel (batch times height
/// times width), as a `[1, 1, 1, 1]` tensor of `x`'s dtype. Counted in f32 (a half-precision
/// count would overflow at 65504) from the static height and width and, when the batch is
/// symbolic, a count of it in the graph. One value per channel has no unbiased variance
/// (PyTorch refuses it): an error when the shape says so.
fn unbiased_factor(x: &Tensor) -> Result<Tensor> {
    let plane = match (x.dim(2)?, x.dim(3)?) {
        (Dim::Static(h), Dim::Static(w)) => h * w,
        _ => {
            return Err(crate::Error::Argument {
                op: "batch_norm".into(),
                path: String::new(),
                message: "training needs static height and width".into(),
            });
        }
    };
    let batch = x.dim(0)?;
    if plane <= 1 && batch.as_static().is_none_or(|b| b <= 1) {
        return Err(crate::Error::Argument {
            op: "batch_norm".into(),
            path: String::new(),
            message: format!("training needs more than one value per channel, and {}x1x1 may have one", batch),
        });
    }
    let ones = x.slice(1, 0, 1usize)?.slice(2, 0, 1usize)?.slice(3, 0, 1usize)?.cast(crate::DType::F32)?;
    let n = ones.mul_scalar(0.0)?.add_scalar(plane as f64)?.sum(&[0], true)?;
    n.div(&n.add_scalar(-1.0)?)?.cast(x.dtype())
}

/// `nn.MaxPool2d`: the largest element of each window.
#[derive(Clone, Copy, Debug)]
pub struct MaxPool2d {
    /// Window size.
    pub kernel: [usize; 2],
    /// Stride and padding (padding at most half the kernel).
    pub window: Window,
}

impl MaxPool2d {
    /// A square window of `kernel`, stepping `stride`, padded by `padding`.
    pub fn new(kernel: usize, stride: usize, padding: usize) -> MaxPool2d {
        MaxPool2d { kernel: [kernel, kernel], window: Window::default().stride(stride).padding(padding) }
    }
}

impl Module for MaxPool2d {
    #[track_caller]
    fn forward(&self, _ctx: &mut ForwardCtx, x: &Tensor) -> Result<Tensor> {
        x.max_pool2d(self.kernel, self.window)
    }
}

/// The mean over height and width, `[n, c, h, w]` to `[n, c, 1, 1]` (`nn.AdaptiveAvgPool2d(1)`).
#[track_caller]
pub fn global_avg_pool(x: &Tensor) -> Result<Tensor> {
    x.mean(&[2, 3], true)
}

/// A `[n, c, h, w]` float image input with a symbolic batch.
pub fn image_dims(channels: usize, height: usize, width: usize) -> [Dim; 4] {
    [Dim::sym("batch"), Dim::fixed(channels), Dim::fixed(height), Dim::fixed(width)]
}
