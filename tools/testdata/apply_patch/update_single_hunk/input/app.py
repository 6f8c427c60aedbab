import sys

def greet():
    print("hi")
    return 0
