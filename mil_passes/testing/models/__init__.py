"""Models the tests convert or write: real architectures (``real``), small torch modules
(``torch_modules``), stateful models (``stateful``), and protobufs written by hand as another
converter would (``handwritten``)."""
