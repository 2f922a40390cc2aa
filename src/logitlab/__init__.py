"""logitlab: is an engine change bit-exact, why not, and is it faster?"""

__version__ = "0.1.0"
