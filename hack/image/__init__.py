"""The gpu-scheduler image, built offline from Debian's packages and the Dockerfile.

`image_archive()` returns the path of its OCI archive (building it when the cache lacks it);
`IMAGE_NAME` is the name it carries. See `hack/image/build.py`.
"""

from hack.image.build import IMAGE_NAME, BuildError, image_archive

__all__ = ["IMAGE_NAME", "BuildError", "image_archive"]
