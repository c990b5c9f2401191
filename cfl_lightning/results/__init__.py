"""``results.json``, one training run's outcome: its schema, writer, validity rule and reader.

* :mod:`~cfl_lightning.results.schema`: every key, its type and what its ``null`` means
  (:data:`FIELDS`, :data:`RESULT_KEYS`; rendered in ``docs/reference.md``), and
  :func:`automaton_id`;
* :mod:`~cfl_lightning.results.writer`: :func:`ordered` (the keys in schema order) and
  :func:`write_results` (strict JSON, atomic);
* :mod:`~cfl_lightning.results.reader`: :func:`read_results`, the validity rule
  (:func:`results_problem`, :func:`has_results`: a file counts when it reads and holds a finite
  ``kl_total``) and :class:`FieldReader` (typed access by the schema);
* :mod:`~cfl_lightning.results.files`: where results files lie (:func:`version_dir`,
  :func:`find_results`, :func:`results_files`) and how an unfinished point's are set aside.

Pure Python (json, no torch): the sweep runner, the ensemble job, ``stratify`` and ``analyze``
use it alike. What a finished run hands over (model, data module, the decomposed KL that the
callback computed) is gathered by :func:`cfl_lightning.callbacks.build_results`.
"""

from cfl_lightning.results.files import (
    ATTEMPTS,
    INVALID_SUFFIX,
    done_in_any_version,
    find_results,
    results_files,
    set_aside,
    version_dir,
)
from cfl_lightning.results.reader import (
    FieldReader,
    ResultsFileError,
    has_results,
    problem_in,
    SPLITS,
    read_results,
    results_problem,
    split_view,
)
from cfl_lightning.results.schema import (
    FIELDS,
    LONG_SPLIT_KEYS,
    OCCURRENCE_PART,
    RESULT_KEYS,
    RESULTS,
    Field,
    automaton_id,
    markdown_table,
    type_problems,
)
from cfl_lightning.results.writer import count_parameters, json_safe, ordered, write_results

__all__ = [
    "RESULTS",
    "ATTEMPTS",
    "INVALID_SUFFIX",
    "Field",
    "FIELDS",
    "RESULT_KEYS",
    "OCCURRENCE_PART",
    "LONG_SPLIT_KEYS",
    "SPLITS",
    "split_view",
    "automaton_id",
    "markdown_table",
    "type_problems",
    "json_safe",
    "ordered",
    "write_results",
    "count_parameters",
    "ResultsFileError",
    "read_results",
    "problem_in",
    "results_problem",
    "has_results",
    "FieldReader",
    "version_dir",
    "done_in_any_version",
    "results_files",
    "find_results",
    "set_aside",
]
