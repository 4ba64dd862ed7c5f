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


def decode_video(path, details=False):
    """A clip's frames as the reference reads them: (frames uint8 [N, H, W, 3], total_frames, fps).

    Containers (MP4, WebM, Matroska, MOV, GIF) are decoded with PyAV exactly as transformers' read_video_pyav
    does (every frame of `container.decode(video=0)`, `frame.to_ndarray(format="rgb24")`), then turned upright
    by the container's display rotation, which PyAV reports but does not apply (qvl applies it):
    `frame.rotation` is FFmpeg's av_display_rotation_get, counter-clockwise degrees, so the frames are turned by
    np.rot90(frame, k=rotation // 90) (-90, the usual phone portrait clip: turned 90 degrees clockwise).
    fps: float(stream.average_rate) (frames / duration where that is unknown); for GIF, frames / the sum of the
    frame delays. Animated WebP is decoded with Pillow (libwebp's animation decoder, as qvl uses), each frame
    .convert("RGB"), fps = frames / the sum of the frame durations.

    details=True returns a dict instead, adding "rotation" (degrees, as FFmpeg reads it), "pix_fmt" (the
    decoder's) and, for yuv420p decoders, "yuv_sha256": per frame the sha256 of the decoded Y, U and V planes
    (rows without padding, concatenated), which identifies the decode apart from the RGB conversion.
    """
    import hashlib

    import numpy as np
    from PIL import Image, ImageSequence

    path = str(path)
    info = {"rotation": 0, "pix_fmt": "rgb24", "yuv_sha256": None}
    if path.endswith((".webp", ".gif")):
        with Image.open(path) as im:
            durations, pil_frames = [], []
            for fr in ImageSequence.Iterator(im):
                pil_frames.append(np.asarray(fr.convert("RGB")))  # loads the frame: WebP sets its duration then
                durations.append(fr.info.get("duration", 0))
        fps = len(durations) / (sum(durations) / 1000.0)
    if path.endswith(".webp"):
        frames = pil_frames
    else:
        import av

        with av.open(path) as container:
            stream = container.streams.video[0]
            frames, yuv, rotation = [], [], None
            for frame in container.decode(video=0):
                if rotation is None:
                    rotation = int(round(frame.rotation))
                    info["pix_fmt"] = frame.format.name
                if frame.format.name == "yuv420p":
                    h = hashlib.sha256()
                    for p, (pw, ph) in zip(frame.planes, [(frame.width, frame.height)] +
                                           [((frame.width + 1) // 2, (frame.height + 1) // 2)] * 2):
                        h.update(np.frombuffer(p, np.uint8).reshape(ph, p.line_size)[:, :pw].tobytes())
                    yuv.append(h.hexdigest())
                frames.append(frame.to_ndarray(format="rgb24"))
            if not path.endswith(".gif"):
                rate = stream.average_rate
                if rate:
                    fps = float(rate)
                else:
                    seconds = float(stream.duration * stream.time_base) if stream.duration else \
                        container.duration / 1e6
                    fps = len(frames) / seconds
        rotation = rotation or 0
        if rotation % 90:
            raise ValueError(f"{path}: rotation {rotation} is not a multiple of 90 degrees")
        frames = [np.ascontiguousarray(np.rot90(f, k=rotation // 90)) for f in frames]
        info["rotation"] = rotation
        info["yuv_sha256"] = yuv if len(yuv) == len(frames) else None
    frames = np.stack(frames)
    if not details:
        return frames, len(frames), fps
    return dict(info, frames=frames, total=len(frames), fps=fps)
