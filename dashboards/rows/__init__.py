"""The dashboard's rows, each a function returning its panels left to right."""
