"""Shared helpers for the golden-data generators: paths and the real processor built from the model files."""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "qwen3-vl-2b-instruct"
DATA = ROOT / "tests" / "data"


def chat_template():
    return json.loads((MODEL / "chat_template.json").read_text())["chat_template"]


def processor():
    """Qwen3VLProcessor exactly as AutoProcessor builds it for the checkpoint (whose tokenizer_config.json is
    not among the shared files: eos <|im_end|>, pad <|endoftext|>, no BOS)."""
    from transformers import Qwen2TokenizerFast, Qwen2VLImageProcessorFast, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok = Qwen2TokenizerFast(tokenizer_file=str(MODEL / "tokenizer.json"), eos_token="<|im_end|>",
                             pad_token="<|endoftext|>", bos_token=None, unk_token=None)
    pre = json.loads((MODEL / "preprocessor_config.json").read_text())
    pre = {k: v for k, v in pre.items() if k not in ("processor_class", "image_processor_type")}
    image_processor = Qwen2VLImageProcessorFast(**pre)
    vpre = json.loads((MODEL / "video_preprocessor_config.json").read_text())
    vpre = {k: v for k, v in vpre.items() if k not in ("processor_class", "video_processor_type")}
    video_processor = Qwen3VLVideoProcessor(**vpre)
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                            chat_template=chat_template())


def config():
    return json.loads((MODEL / "config.json").read_text())
