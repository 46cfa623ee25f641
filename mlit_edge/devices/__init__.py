"""TensorRT and Jetson rules beside the device table (`jetpacks.json`): the device profiles by JetPack, the
attention and UINT8-input rules of each TensorRT, the TensorRT environment (import, plan verification) and what
a plan's consumer may rely on. Torch-free; it stands on `base` and `artifacts`."""
