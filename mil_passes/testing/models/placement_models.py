"""The models of docs/neural-engine.md's real-model table beyond those the tests convert.

Each is a :class:`~mil_passes.testing.models.real.RealModel` (a tiny config, random weights, nothing
downloaded): transformers encoders whose attention mask is ``(1 - mask) * finfo(float32).min``
(ELECTRA, MobileBERT, T5's encoder, DistilBERT), decoders with a flexible sequence (Qwen2, Phi-3,
CLIP's text model), a fixed-length Llama-style prefill, and a detector head whose ``topk`` indices
gather its boxes (``torch.gather(boxes, 1, idx.unsqueeze(-1).repeat(1, 1, 4))``, as RF-DETR's
post-processing does).
"""

from __future__ import annotations

from typing import Any

from .real import _TINY_T5, _TINY_TEXT, RealModel, _attention_mask, _named, _normal, _tokens, transformers_model

_FLEXIBLE_TEXT = {"input_ids": {1: (1, 64)}}
_FLEXIBLE_MASKED = {"input_ids": {1: (1, 64)}, "attention_mask": {1: (1, 64)}}
_MASKED_KEYS = ("input_ids", "attention_mask")


def _encoder(config_class: str, model_class: str, config: dict[str, Any], **model_options: Any):
    """An encoder reading ``input_ids`` and ``attention_mask``, its attention written out."""
    return transformers_model(config_class, model_class, _MASKED_KEYS, config, eager=True, model_options=model_options)


def electra():
    config = dict(embedding_size=16, max_position_embeddings=64, **_TINY_TEXT)
    return _encoder("ElectraConfig", "ElectraModel", config)


def mobilebert():
    config = dict(
        _TINY_TEXT, embedding_size=16, intra_bottleneck_size=16, num_feedforward_networks=1, max_position_embeddings=64
    )
    return _encoder("MobileBertConfig", "MobileBertModel", config, add_pooling_layer=False)


def distilbert():
    config = dict(vocab_size=96, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)
    return _encoder("DistilBertConfig", "DistilBertModel", config)


def t5_encoder():
    return _encoder("T5Config", "T5EncoderModel", _TINY_T5)


def _decoder(config_class: str, model_class: str, **config: Any):
    settings = dict(_TINY_TEXT, max_position_embeddings=64, **config)
    return transformers_model(config_class, model_class, ("input_ids",), settings, eager=True, use_cache=False)


def qwen2():
    return _decoder("Qwen2Config", "Qwen2Model", num_key_value_heads=1)


def phi3():
    return _decoder("Phi3Config", "Phi3Model", num_key_value_heads=1, pad_token_id=0)


def llama_prefill():
    return _decoder("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=1)


def clip_text():
    config = dict(_TINY_TEXT, max_position_embeddings=64)
    return transformers_model("CLIPTextConfig", "CLIPTextModel", ("input_ids",), config, eager=True)


def detector_head(queries: int = 32, classes: int = 8, keep: int = 10):
    """The top ``keep`` of ``queries`` detections and their boxes: ``topk`` of the best class logit,
    then ``torch.gather`` of the boxes by the indices, tiled over the 4 coordinates. (Logits, not
    their sigmoid: sigmoid scores tie in fp16 and the top boxes would differ from torch's.)"""
    import torch

    class DetectorHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.classify = torch.nn.Linear(16, classes)
            self.box = torch.nn.Linear(16, 4)

        def forward(self, features):
            scores = self.classify(features).amax(-1)
            top, indices = torch.topk(scores, keep, dim=1)
            boxes = torch.gather(self.box(features), 1, indices.unsqueeze(-1).repeat(1, 1, 4))
            return top, boxes

    return DetectorHead()


MASKED = _named(input_ids=_tokens(1, 9), attention_mask=_attention_mask)

MODELS: tuple[RealModel, ...] = (
    RealModel("electra", electra, MASKED),
    RealModel("mobilebert", mobilebert, MASKED),
    RealModel("t5_encoder", t5_encoder, MASKED),
    RealModel("distilbert_flexible", distilbert, MASKED, flexible=_FLEXIBLE_MASKED),
    RealModel("t5_encoder_flexible", t5_encoder, MASKED, flexible=_FLEXIBLE_MASKED),
    RealModel("clip_text_flexible", clip_text, _named(input_ids=_tokens(1, 9)), flexible=_FLEXIBLE_TEXT),
    RealModel("qwen2_flexible", qwen2, _named(input_ids=_tokens(1, 9)), flexible=_FLEXIBLE_TEXT),
    RealModel("phi3_flexible", phi3, _named(input_ids=_tokens(1, 9)), flexible=_FLEXIBLE_TEXT),
    RealModel("llama_prefill", llama_prefill, _named(input_ids=_tokens(1, 9))),
    RealModel("detector_head", detector_head, _named(features=_normal(1, 32, 16))),
)

BY_NAME = {model.name: model for model in MODELS}
