"""The serving stacks an artifact is handed to: Triton's model repository (config.pbtxt and its parser's rules)
and DeepStream (nvinfer's and deepstream-app's key files, GLib's key-file rules), with the graph record both
check a model against. Torch-free; it stands on the rooms below it and the device runtime."""
