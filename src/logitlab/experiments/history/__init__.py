"""History: results recorded per commit and machine, their metrics, and change points over the series.

``store`` (the folder of records and its series), ``metrics`` (what each
result kind contributes to a series), ``show`` (``history show``: series,
change points, the report's data).
"""
