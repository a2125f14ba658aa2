"""Failures as Spark raises them, without Spark: a Java cause chain as py4j presents it, or a
Spark Connect error's text alone."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class JavaClass:
    name: str

    def getSimpleName(self) -> str:
        return self.name


@dataclass
class JavaException:
    """What py4j hands over: a Java throwable's message, class and cause."""

    name: str
    message: str
    cause: JavaException | None = None

    def getMessage(self) -> str:
        return self.message

    def getClass(self) -> JavaClass:
        return JavaClass(self.name)

    def getCause(self) -> JavaException | None:
        return self.cause


class SparkFailure(Exception):
    def __init__(self, text: str, java: JavaException | None = None) -> None:
        super().__init__(text)
        self.java_exception = java


def chain(*links: tuple[str, str]) -> JavaException:
    cause = None
    for name, message in reversed(links):
        cause = JavaException(name, message, cause)
    assert cause is not None
    return cause
