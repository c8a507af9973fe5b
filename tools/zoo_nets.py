"""torch.nn definitions of the zoo's models: CNNs with torchvision's layouts (no torchvision) and a
BERT-style encoder.

Imported by ``lite.tools.zoo`` only when a PyTorch model is built, so importing the zoo
does not import torch.
"""

from __future__ import annotations

import torch
from torch import nn


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU, eps: float = 1e-5) -> nn.Sequential:
    """Conv (no bias) -> BatchNorm -> optional activation, 'same' padding."""
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=eps)]
    return nn.Sequential(*layers, *([act(inplace=True)] if act else []))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    return nn.Identity() if stride == 1 and cin == cout else conv_bn(cin, cout, 1, stride, act=None)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, planes, 3, stride), conv_bn(planes, planes, 3, act=None))
        self.shortcut = _shortcut(cin, planes, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        out = planes * self.expansion
        self.body = nn.Sequential(conv_bn(cin, planes, 1), conv_bn(planes, planes, 3, stride),
                                  conv_bn(planes, out, 1, act=None))
        self.shortcut = _shortcut(cin, out, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for k, (planes, depth) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            for j in range(depth):
                stages.append(block(cin, planes, 2 if j == 0 and k > 0 else 1))
                cin = planes * block.expansion
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


class SqueezeExcitation(nn.Module):
    """Channel gates: global average pool -> 1x1 conv -> ``act`` -> 1x1 conv -> ``gate``, times the input."""

    def __init__(self, channels: int, squeeze: int, act: type[nn.Module], gate: type[nn.Module]):
        super().__init__()
        self.fc1, self.act = nn.Conv2d(channels, squeeze, 1), act(inplace=True)
        self.fc2, self.gate = nn.Conv2d(squeeze, channels, 1), gate()
        he_init(self)  # NOTE: PyTorch's default init leaves every gate near 0.5 whatever the input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(scale))))


class InvertedResidual(nn.Module):
    """1x1 expand (none when ``hidden == cin``), depthwise conv, optional ``se``, 1x1 project, residual add
    when the shape is kept: MobileNetV2's and V3's block, EfficientNet's MBConv."""

    def __init__(self, cin: int, hidden: int, cout: int, stride: int, kernel: int = 3,
                 act: type[nn.Module] = nn.ReLU6, se: nn.Module | None = None, eps: float = 1e-5):
        super().__init__()
        layers = [] if hidden == cin else [conv_bn(cin, hidden, 1, act=act, eps=eps)]
        layers += [conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=act, eps=eps), *([se] if se else []),
                   conv_bn(hidden, cout, 1, act=None, eps=eps)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class PooledClassifier(nn.Module):
    """``features`` -> global average pool -> ``classifier``; subclasses build both."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class MobileNetV2(PooledClassifier):
    # (expansion, output channels, repeats, first stride)
    CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
              (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
        for expand, cout, repeats, stride in self.CONFIG:
            for j in range(repeats):
                layers.append(InvertedResidual(cin, cin * expand, cout, stride if j == 0 else 1))
                cin = cout
        self.features = nn.Sequential(*layers, conv_bn(cin, 1280, 1, act=nn.ReLU6))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))


def _divisible_by_8(v: float) -> int:
    """torchvision's ``_make_divisible(v, 8)``: v rounded to a multiple of 8, at least 8 and 0.9 v."""
    rounded = max(8, int(v + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * v else rounded


class MobileNetV3Large(PooledClassifier):
    """torchvision's MobileNetV3-Large: BatchNorm eps 1e-3, SE gates squeeze to hidden / 4 (rounded to 8)."""

    # (kernel, expanded channels, output channels, squeeze-and-excitation, hardswish (else ReLU), stride)
    CONFIG = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
              (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
              (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
              (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
              (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [conv_bn(3, 16, 3, 2, act=nn.Hardswish, eps=1e-3)], 16
        for kernel, hidden, cout, use_se, hardswish, stride in self.CONFIG:
            se = SqueezeExcitation(hidden, _divisible_by_8(hidden / 4), nn.ReLU, nn.Hardsigmoid) if use_se else None
            act = nn.Hardswish if hardswish else nn.ReLU
            layers.append(InvertedResidual(cin, hidden, cout, stride, kernel, act, se, eps=1e-3))
            cin = cout
        self.features = nn.Sequential(*layers, conv_bn(cin, 6 * cin, 1, act=nn.Hardswish, eps=1e-3))
        self.classifier = nn.Sequential(nn.Linear(6 * cin, 1280), nn.Hardswish(inplace=True), nn.Dropout(0.2),
                                        nn.Linear(1280, num_classes))


class EfficientNetB0(PooledClassifier):
    """torchvision's EfficientNet-B0: SiLU, MBConv blocks with SE gates squeezing to block input / 4.

    Stochastic depth is the identity at eval, so it is left out.
    """

    # (expansion, kernel, first stride, output channels, repeats)
    CONFIG = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
        for expand, kernel, stride, cout, repeats in self.CONFIG:
            for j in range(repeats):
                se = SqueezeExcitation(cin * expand, max(1, cin // 4), nn.SiLU, nn.Sigmoid)
                layers.append(InvertedResidual(cin, cin * expand, cout, stride if j == 0 else 1, kernel, nn.SiLU, se))
                cin = cout
        self.features = nn.Sequential(*layers, conv_bn(cin, 1280, 1, act=nn.SiLU))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand1: int, expand3: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
        self.expand1 = nn.Sequential(nn.Conv2d(squeeze, expand1, 1), nn.ReLU(inplace=True))
        self.expand3 = nn.Sequential(nn.Conv2d(squeeze, expand3, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze(x)
        return torch.cat([self.expand1(x), self.expand3(x)], 1)


def _ceil_pool() -> nn.MaxPool2d:
    return nn.MaxPool2d(3, 2, ceil_mode=True)


def squeezenet(num_classes: int = 1000) -> nn.Module:
    """SqueezeNet 1.1: fire modules between ceil-mode max pools, a conv classifier."""
    pool = _ceil_pool
    return he_init(nn.Sequential(
        nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(),
        Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
        Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),
        Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
        nn.Dropout(0.5), nn.Conv2d(512, num_classes, 1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
    ))


@torch.no_grad()
def he_init(module: nn.Module) -> nn.Module:
    """He-normal conv weights and small biases.

    # NOTE: without BatchNorm, PyTorch's default init shrinks the signal at every ReLU
    # layer until the biases alone decide the output, which then ignores the input.
    """
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            m.bias.normal_(0.0, 0.01)
    return module


class InceptionBlock(nn.Module):
    """GoogLeNet's inception (3a): 1x1 | 1x1 -> 3x3 | 1x1 -> 5x5 | 3x3 max pool -> 1x1, concatenated."""

    def __init__(self, cin: int = 192):
        super().__init__()
        self.branches = nn.ModuleList([
            conv_bn(cin, 64, 1),
            nn.Sequential(conv_bn(cin, 96, 1), conv_bn(96, 128, 3)),
            nn.Sequential(conv_bn(cin, 16, 1), conv_bn(16, 32, 5)),
            nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, 32, 1)),
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], 1)


class SelfAttention(nn.Module):
    """Multi-head self-attention over (batch, seq, width): one QKV projection, scaled dot product, out projection."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.width, self.heads = width, heads
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        head = self.width // self.heads
        q, k, v = self.qkv(x).reshape(batch, seq, 3, self.heads, head).permute(2, 0, 3, 1, 4)
        scores = torch.softmax(q @ k.transpose(-1, -2) / head**0.5, dim=-1)
        return self.out((scores @ v).transpose(1, 2).reshape(batch, seq, self.width))


class EncoderBlock(nn.Module):
    """Post-norm transformer block: LayerNorm(x + attention), then LayerNorm(x + GELU feed-forward)."""

    def __init__(self, width: int, heads: int, feed_forward: int):
        super().__init__()
        self.attention, self.norm1, self.norm2 = SelfAttention(width, heads), nn.LayerNorm(width), nn.LayerNorm(width)
        self.feed_forward = nn.Sequential(nn.Linear(width, feed_forward), nn.GELU(), nn.Linear(feed_forward, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.feed_forward(x))


def transformer_encoder(layers: int, width: int, heads: int, feed_forward: int) -> nn.Sequential:
    """A BERT-style encoder without embeddings: ``layers`` post-norm blocks, (batch, seq, width) in and out."""
    return nn.Sequential(*[EncoderBlock(width, heads, feed_forward) for _ in range(layers)])


@torch.no_grad()
def calibrate_batchnorm(module: nn.Module, sample_shape: tuple[int, ...], batches: int = 2) -> None:
    """Random BatchNorm affine parameters, and running statistics measured on random inputs.

    # NOTE: made-up running statistics let activations shrink or grow layer after layer,
    # until a deep net's output no longer depends on its input (then a wrong kernel could
    # still match the reference). Statistics measured in train mode keep every layer's
    # output normalised, as in a trained network, and BN folding still changes the weights.
    """
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a plain average over the calibration batches
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_(0.0, 0.1)
    module.train()
    for _ in range(batches):
        module(torch.randn(4, *sample_shape))
    module.eval()
