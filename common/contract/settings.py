"""The one reader of a trainer's settings: a config section into small frozen dataclasses, each
group of keys (what serves the source, the augmentation, the evaluation) a class that names its
own checks.

A settings class has a field per key, named as the key, and may say:
  CHECKS = {field: checks.Check}: each value's type and range (checks.check_values' line);
  BOUNDS = {field: (maximum, why)}: each count's upper bound (bounds.check's line);
  __post_init__: what it checks across its fields (a ConfigError naming the keys).
A field typed with another settings class is a group: read from the subsection of its name when
the section has one (data.augment), else from the same keys (the groups of one flat data section;
data.source, the source's kind, is a key of the group named source).
"""
import dataclasses
import typing

from common.contract import bounds
from common.contract import checks


def read(cls, section, prefix):
  """cls of `section` (a ConfigDict or dict) at the dotted key `prefix` ("data"), every value
  checked in field order: the first one refused is a ConfigError naming `<prefix>.<key>`. An unset
  path (None for a str field) is "", a list of a tuple field a tuple."""
  values = {}
  for field in dataclasses.fields(cls):
    if dataclasses.is_dataclass(field.type):
      inner = field.name in section and hasattr(section[field.name], "keys")  # a subsection
      values[field.name] = read(field.type, section[field.name] if inner else section,
                                f"{prefix}.{field.name}" if inner else prefix)
    else:
      values[field.name] = section[field.name]
  nested = values
  for part in reversed(prefix.split(".")):
    nested = {part: nested}
  checks.check_values(nested, {f"{prefix}.{key}": check for key, check in getattr(cls, "CHECKS", {}).items()})
  bounds.check(nested, {f"{prefix}.{key}": bound for key, bound in getattr(cls, "BOUNDS", {}).items()})
  for field in dataclasses.fields(cls):
    if field.type is str and values[field.name] is None:
      values[field.name] = ""
    elif typing.get_origin(field.type) is tuple or field.type is tuple:
      values[field.name] = tuple(values[field.name])
  return cls(**values)
