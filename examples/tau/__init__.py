"""The tau-bench adapters a harness would write: typed state for policies/tau_{airline,retail}.zc.

Data and tasks: tau2-bench (Sierra, MIT; LICENSE.tau2-bench beside this file).
"""
