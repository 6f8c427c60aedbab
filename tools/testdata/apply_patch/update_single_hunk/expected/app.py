import sys

def greet():
    print("hello")
    return 0
