"""Every accepted layout becomes the same canonical HF-messages conversation."""

from __future__ import annotations

import json

import pytest

from vlmpack_offline.conversation import MediaRef, parse_conversation
from vlmpack_offline.reasons import DropError

PARTS = ("json", "img0.jpg", "img1.png")

CANONICAL = (
    {"role": "user", "content": [
        {"type": "image", "image": "img0.jpg"},
        {"type": "text", "text": "\nWhat differs from "},
        {"type": "image", "image": "img1.png"},
        {"type": "text", "text": "?"},
    ]},
    {"role": "assistant", "content": [{"type": "text", "text": "The colour."}]},
)

LAYOUTS = {
    "hf_messages": {"messages": [
        {"role": "user", "content": [
            {"type": "image", "image": "img0.jpg"},
            {"type": "text", "text": "\nWhat differs from "},
            {"type": "image", "image": "img1.png"},
            {"type": "text", "text": "?"},
        ]},
        {"role": "assistant", "content": "The colour."},
    ]},
    "sharegpt": {
        "conversations": [
            {"from": "human", "value": "<image>\nWhat differs from <image>?"},
            {"from": "gpt", "value": "The colour."},
        ],
        "images": ["img0.jpg", "img1.png"],
    },
    "sharegpt_unnamed": {"conversations": [
        {"from": "human", "value": "<image>\nWhat differs from <image>?"},
        {"from": "gpt", "value": "The colour."},
    ]},
    "hf_unnamed": {"messages": [
        {"role": "user", "content": [
            {"type": "image"},
            {"type": "text", "text": "\nWhat differs from "},
            {"type": "image", "image": ""},
            {"type": "text", "text": "?"},
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "The colour."}]},
    ]},
    "texts": {"texts": [{"user": "<image>\nWhat differs from <image>?", "assistant": "The colour."}],
              "images": ["img0.jpg", "img1.png"]},
    # the published offline-packing tool's converter: texts as HF messages + media + name
    "published_texts_name": {"texts": [{"role": "user", "content": "<image>\nWhat differs from <image>?"},
                                       {"role": "assistant", "content": "The colour."}],
                             "media": "image", "name": ["img0.jpg", "img1.png"]},
    "published_media_files_nested": {"texts": [{"role": "user", "content": "<image>\nWhat differs from <image>?"},
                                               {"role": "assistant", "content": "The colour."}],
                                     "media_type": "image", "media_files": [["img0.jpg"], ["img1.png"]]},
    # its VQA branch: the JSON is the message list itself
    "published_vqa_list": [{"from": "human", "value": "<image>\nWhat differs from <image>?"},
                           {"from": "gpt", "value": "The colour."}],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_equivalent_layouts_parse_to_the_same_canonical_messages(layout):
    conv = parse_conversation(json.dumps(LAYOUTS[layout]), key="sub/k1", parts=PARTS, template_text_key="texts")
    assert conv.messages == CANONICAL
    assert conv.media == (MediaRef(kind="image", part="img0.jpg"), MediaRef(kind="image", part="img1.png"))
    assert conv.media_type == "image"


def test_text_around_tags_is_kept_verbatim():
    value = "  Look:<image>  \n\n twice <video>end  "
    raw = {"conversations": [{"from": "human", "value": value}, {"from": "gpt", "value": " ok "}],
           "images": ["a.jpg"], "videos": ["v.mp4"]}
    conv = parse_conversation(json.dumps(raw), key="k", parts=("json", "a.jpg", "v.mp4"))
    texts = [item["text"] for item in conv.messages[0]["content"] if item["type"] == "text"]
    assert texts == ["  Look:", "  \n\n twice ", "end  "]
    assert conv.messages[1]["content"] == [{"type": "text", "text": " ok "}]
    assert conv.media_type == "video"


def test_unnamed_media_are_taken_by_extension_in_member_order():
    raw = {"conversations": [{"from": "human", "value": "<video><image><image>"}, {"from": "gpt", "value": "x"}]}
    parts = ("json", "z.png", "clip.mp4", "a.jpg")
    conv = parse_conversation(json.dumps(raw), key="k", parts=parts)
    assert conv.media == (
        MediaRef(kind="video", part="clip.mp4"),
        MediaRef(kind="image", part="z.png"),
        MediaRef(kind="image", part="a.jpg"),
    )


def test_media_named_with_the_sample_key_prefix_resolves_to_the_part():
    raw = {"conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}],
           "images": ["k7.img0.jpg"]}
    conv = parse_conversation(json.dumps(raw), key="sub/k7", parts=("json", "img0.jpg"))
    assert conv.media == (MediaRef(kind="image", part="img0.jpg"),)


@pytest.mark.parametrize(
    ("raw", "parts", "reason"),
    [
        (b'{"messages": [', ("json",), "bad_json"),
        (b"\xff\xfe not utf-8", ("json",), "bad_json"),
        (json.dumps({"caption": "a cat"}), ("json",), "unknown_format"),
        (json.dumps([1, 2]), ("json",), "unknown_format"),
        (json.dumps({"messages": []}), ("json",), "unknown_format"),
        (json.dumps({"messages": [{"role": "user", "content": [{"type": "image", "image": "img1.jpg"}]},
                                  {"role": "assistant", "content": "x"}]}), ("json", "img0.jpg"), "missing_media"),
        (json.dumps({"conversations": [{"from": "human", "value": "<image><image>"}, {"from": "gpt", "value": "x"}]}),
         ("json", "img0.jpg"), "missing_media"),
        (json.dumps({"conversations": [{"from": "human", "value": "<image><image>"}, {"from": "gpt", "value": "x"}],
                     "images": ["img0.jpg"]}), ("json", "img0.jpg", "img1.jpg"), "missing_media"),
    ],
    ids=["truncated", "not_utf8", "no_conversation_key", "not_object", "no_turns", "named_part_absent",
         "more_tags_than_parts", "more_tags_than_images_list"],
)
def test_unusable_json_raises_with_its_drop_reason(raw, parts, reason):
    with pytest.raises(DropError) as info:
        parse_conversation(raw, key="k", parts=parts)
    assert info.value.reason == reason
    assert str(info.value)


# -- layouts other tools write -------------------------------------------------------------------


def _parse(data: dict, parts: tuple[str, ...], key: str = "k"):
    return parse_conversation(json.dumps(data), key=key, parts=("json", *parts))


def test_llama_factory_messages_with_tags_in_string_content_take_the_images_list():
    data = {
        "messages": [{"role": "user", "content": "<image>Compare with <image>, please."},
                     {"role": "assistant", "content": "The first is larger."}],
        "images": ["b.jpg", "a.png"],
    }  # fmt: skip
    conv = _parse(data, ("a.png", "b.jpg"))
    assert conv.messages[0]["content"] == [
        {"type": "image", "image": "b.jpg"},
        {"type": "text", "text": "Compare with "},
        {"type": "image", "image": "a.png"},
        {"type": "text", "text": ", please."},
    ]
    assert [m.part for m in conv.media] == ["b.jpg", "a.png"]


def test_string_content_without_media_keeps_a_literal_tag_as_text():
    conv = _parse({"messages": [{"role": "user", "content": "What does <image> mean in HTML?"},
                                {"role": "assistant", "content": "Nothing."}]}, ())  # fmt: skip
    assert conv.media == () and conv.messages[0]["content"][0]["text"] == "What does <image> mean in HTML?"


def test_llava_original_paths_resolve_by_basename_then_by_position():
    turns = [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A bus."}]
    by_name = _parse({"conversations": turns, "image": "coco/train2017/000000123.jpg"}, ("000000123.jpg",))
    assert [m.part for m in by_name.media] == ["000000123.jpg"]
    by_position = _parse({"conversations": turns, "image": "coco/train2017/000000123.jpg"}, ("jpg",))
    assert [m.part for m in by_position.media] == ["jpg"]
    prefixed = _parse({"conversations": turns, "images": ["sub/k9.img0.jpg"]}, ("img0.jpg",), key="sub/k9")
    assert [m.part for m in prefixed.media] == ["img0.jpg"]


@pytest.mark.parametrize(
    ("data", "parts", "reason", "counts"),
    [
        ({"messages": [{"role": "user", "content": "<image> only one tag"}, {"role": "assistant", "content": "x"}],
          "images": ["a.jpg", "b.jpg"]}, ("a.jpg", "b.jpg"), "media_mismatch", ("1 <image> tags", "lists 2")),
        ({"conversations": [{"from": "human", "value": "<image> one tag"}, {"from": "gpt", "value": "x"}]},
         ("a.jpg", "b.jpg"), "media_mismatch", ("1 <image> tags", "has 2 image parts")),
        ({"messages": [{"role": "user", "content": "<image><image>"}, {"role": "assistant", "content": "x"}],
          "images": ["a.jpg"]}, ("a.jpg",), "missing_media", ("more <image> tags", "(1)")),
        ({"conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}], "images": 5},
         ("a.jpg",), "unknown_format", ("`images` must be",)),
    ],
    ids=["fewer_tags_than_list", "fewer_tags_than_parts", "more_tags_than_list", "list_not_a_list"],
)
def test_tags_and_media_that_disagree_drop_the_sample_naming_both_counts(data, parts, reason, counts):
    with pytest.raises(DropError) as info:
        _parse(data, parts)
    assert info.value.reason == reason
    for text in counts:
        assert text in str(info.value)


def _published(raw, parts=("json", "jpg")):
    return parse_conversation(json.dumps(raw), key="coco_1", parts=parts)


def test_published_vqa_list_without_a_tag_opens_the_first_user_turn_with_the_image():
    conv = _published([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How many?"},
                   {"role": "assistant", "content": "Two."}])  # fmt: skip
    assert conv.messages[1]["content"] == [{"type": "image", "image": "jpg"}, {"type": "text", "text": "How many?"}]
    assert conv.media == (MediaRef(kind="image", part="jpg"),)


def test_published_captions_pair_each_image_with_its_prompt_and_caption():
    parts = ("json", "img000.jpg", "img001.jpg")
    conv = _published({"images": ["img000.jpg", "img001.jpg"], "prompt": ["Describe.", ""],
                   "captions": [{"content": "A cat."}, "A dog."]}, parts)  # fmt: skip
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user", "assistant"]
    assert conv.messages[0]["content"] == [{"type": "image", "image": "img000.jpg"}, {"type": "text", "text": "Describe."}]
    assert conv.messages[2]["content"] == [{"type": "image", "image": "img001.jpg"}]
    assert conv.messages[3]["content"] == [{"type": "text", "text": "A dog."}]


def test_published_nested_captions_are_sub_conversations_with_their_own_images():
    conv = _published({"images": [["img000.jpg"], []], "prompts": [["Describe."], ["How are you?", "And now?"]],
                   "captions": [["A tree."], ["Fine.", "Still fine."]]}, ("json", "img000.jpg"))  # fmt: skip
    users = [m["content"] for m in conv.messages if m["role"] == "user"]
    assert users == [[{"type": "image", "image": "img000.jpg"}, {"type": "text", "text": "Describe."}],
                     [{"type": "text", "text": "How are you?"}], [{"type": "text", "text": "And now?"}]]  # fmt: skip


def test_published_name_list_and_tags_must_agree_in_number():
    with pytest.raises(DropError) as info:
        _published({"texts": [{"role": "user", "content": "<image> one tag"}, {"role": "assistant", "content": "x"}],
                "media": "image", "name": ["a.jpg", "b.jpg"]}, ("json", "a.jpg", "b.jpg"))  # fmt: skip
    assert info.value.reason == "media_mismatch"
    assert str(info.value) == "the text has 1 <image> tags but `name` lists 2"
