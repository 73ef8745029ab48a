"""The zoo's conformance suite (`interlayer.testing.ConformanceSuite`) on every example of every mechanism's record
(`interlayer.mechanisms`): one class `Test<label>Conformance` per example, built from the record alone
(`conformance_cases.conformance_suites`), so a registered mechanism is covered with no test written for it."""

from conformance_cases import conformance_suites

for _name, _suite in conformance_suites().items():
    _suite.__module__ = __name__
    globals()[_name] = _suite
