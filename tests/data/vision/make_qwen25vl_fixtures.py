"""Records the Qwen2.5-VL preprocessing references edgellm's tests compare against
(tests/test_vision_qwen25vl.py). Needs transformers (not a requirement of edgellm); run from the
repository root:
    /work/venv-ref/bin/python tests/data/vision/make_qwen25vl_fixtures.py
transformers' Qwen2VLImageProcessorPil (what Qwen2_5_VLProcessor uses: dynamic resolution by
smart_resize to multiples of 28 px within [min_pixels, max_pixels], bicubic, CLIP's mean / std,
patches of 2 x 14 x 14 in 2 x 2 merge order) on the 20 images of tests/vision_images.py, twice:
with Qwen2.5-VL's published pixel bounds and with a max_pixels small enough to shrink most of them.
  qwen25vl.npz  pre_pixels_{k}_{j} (the processor's flattened patches) and pre_grid_{k}_{j}
                (grid_t, grid_h, grid_w) for bounds k (BOUNDS) and image j
Recorded with transformers 5.25.0, Pillow 13.0.0."""
import os

import numpy as np

from make_vision_fixtures import HERE, vision_images

# (min_pixels, max_pixels): Qwen2.5-VL's preprocessor_config.json, and a small budget
BOUNDS = [(3136, 12845056), (3136, 28 * 28 * 48)]


def main():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = {}
    for k, (lo, hi) in enumerate(BOUNDS):
        ip = Qwen2VLImageProcessorPil(size={"shortest_edge": lo, "longest_edge": hi})
        for j, spec in enumerate(vision_images.preprocessing_images()):
            r = ip(images=[vision_images.to_pil(spec)], return_tensors="np")
            out[f"pre_pixels_{k}_{j}"] = r["pixel_values"].astype(np.float32)
            out[f"pre_grid_{k}_{j}"] = r["image_grid_thw"][0].astype(np.int32)
    np.savez_compressed(os.path.join(HERE, "qwen25vl.npz"), **out)
    print("wrote", os.path.join(HERE, "qwen25vl.npz"))


if __name__ == "__main__":
    main()
