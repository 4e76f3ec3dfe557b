"""How a number of points is written in every output: an integer when it is one, else at most 4 decimals."""


def points(x) -> float | int:
    x = float(x or 0.0)
    return int(x) if x.is_integer() else round(x, 4)
