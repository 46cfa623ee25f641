"""The device runtime: classify images on the device with numpy and TensorRT (or ONNX Runtime).

Runners behind one contract, the one artifact loader, the classifier, the inbox service, images, video and
camera sources and the stream. Nothing here imports torch (a test proves it); it stands on `base`,
`artifacts` and `devices`.

    from mlit_edge.runtime import Classifier
    with Classifier.load("mlit-xxs-fp16.plan") as clf:
        print(clf.predict(["cat.jpg"])[0].name)
"""
from .classifier import Classifier, Prediction
from .images import InputError, load_image
from .serve import predict_files, watch

__all__ = ["Classifier", "InputError", "Prediction", "load_image", "predict_files", "watch"]
