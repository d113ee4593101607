"""Samples for the packed-layout tests, and the pipeline that packs them (scan -> bucket -> plan).

Not a test module. Each sample: its JSON, its media parts, what a trainer must see of it (turns as
``(role, text with <image> / <video> placeholders)``) and its media bytes in order.
"""

from __future__ import annotations

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.stages import bucket, plan, scan
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard

JPG, PNG = image_bytes(96, 64, seed=1), image_bytes(64, 80, fmt="PNG", seed=2)
CLIP = video_bytes(8, 4, 64, 64, seed=3)


def hf(*turns, system=None, media=()):
    """An HF-messages sample: turns alternate user / assistant, media items lead the first user turn."""
    messages = [{"role": "system", "content": system}] if system else []
    for index, text in enumerate(turns):
        role = "user" if index % 2 == 0 else "assistant"
        content = [{"type": kind, kind: part} for kind, part in media] if index == 0 else []
        messages.append({"role": role, "content": content + [{"type": "text", "text": text}]})
    return {"messages": messages}


# key -> (json, media parts, what the trainer must see: [(role, text with placeholders)], media bytes in order)
SINGLE_IMAGE = {
    "cap_jpg": (hf("Describe it.", "A gradient.", media=[("image", "img.jpg")]), {"img.jpg": JPG},
                [("user", "<image>Describe it."), ("assistant", "A gradient.")], [JPG]),
    "cap_png": (hf("And this?", "Another one.", media=[("image", "p.png")]), {"p.png": PNG},
                [("user", "<image>And this?"), ("assistant", "Another one.")], [PNG]),
}  # fmt: skip
CAPTIONS = {  # an image and its caption: no prompt text (the captioning trainer trains on the caption alone)
    "caption_jpg": (hf("", "A gradient.", media=[("image", "img.jpg")]), {"img.jpg": JPG},
                    [("user", "<image>"), ("assistant", "A gradient.")], [JPG]),
    "caption_png": (hf("", "Another one.", media=[("image", "p.png")]), {"p.png": PNG},
                    [("user", "<image>"), ("assistant", "Another one.")], [PNG]),
}  # fmt: skip
CONVERSATIONS = {
    **SINGLE_IMAGE,
    "two_images": (hf("Compare.", "Same size.", media=[("image", "a.jpg"), ("image", "b.png")]),
                   {"a.jpg": JPG, "b.png": PNG},
                   [("user", "<image><image>Compare."), ("assistant", "Same size.")], [JPG, PNG]),
    "multi_turn": (hf("Hi.", "Hello.", "And now?", "Now this."), {},
                   [("user", "Hi."), ("assistant", "Hello."), ("user", "And now?"), ("assistant", "Now this.")], []),
    "odd_name": (hf("What?", "A photo.", media=[("image", "photo")]), {"photo": JPG},  # no image extension
                 [("user", "<image>What?"), ("assistant", "A photo.")], [JPG]),
    "video": (hf("What moves?", "A square.", media=[("video", "v.mp4")]), {"v.mp4": CLIP},
              [("user", "<video>What moves?"), ("assistant", "A square.")], [CLIP]),
}  # fmt: skip
LATE_SYSTEM = {  # a system turn after the first turn: packed_chat_mix's trainer would move it to the front
    "late_system": ({"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
                                  {"role": "system", "content": "Now be brief."}, {"role": "user", "content": "And?"},
                                  {"role": "assistant", "content": "Done."}]}, {}, [], []),
}  # fmt: skip
SYSTEM = {
    "with_system": (hf("Hi.", "Hello.", system="Be brief."), {},
                    [("system", "Be brief."), ("user", "Hi."), ("assistant", "Hello.")], []),
}  # fmt: skip


def pack_through_plan(tmp_path, processor, samples: dict, sample_type: str, **sections: dict):
    write_shard(tmp_path / "wds" / "part-0.tar",
                [SyntheticSample(key=key, json=js, media=media) for key, (js, media, _, _) in samples.items()])  # fmt: skip
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "wds"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": 4096, "sample_type": sample_type},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        **sections,
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan):
        assert stage.run(config).exit_code == 0
    return config
