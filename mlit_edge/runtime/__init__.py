"""The torch-free floor: classify images on the device with numpy and TensorRT (or ONNX Runtime).

Every other stage imports from here, never the reverse, and nothing here imports torch (a test
proves it): runners, the one artifact loader, sidecars, plan verification, preprocessing, the
classifier and the inbox service.

    from mlit_edge.runtime import Classifier
    with Classifier.load("mlit-xxs-fp16.plan") as clf:
        print(clf.predict(["cat.jpg"])[0].name)
"""
from .classifier import Classifier, Prediction
from .images import InputError, load_image
from .serve import predict_files, watch

__all__ = ["Classifier", "InputError", "Prediction", "load_image", "predict_files", "watch"]
