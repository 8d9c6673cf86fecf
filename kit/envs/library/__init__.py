"""An example domain of one's own: a library desk (see docs/adding_a_domain.md).

Three pieces, as in a tau2 domain folder: a pydantic database (`LibraryDB`), tools as
typed methods with docstrings (`LibraryTools`; the docstring becomes the tool schema), and
data files next to this module (db.json, policy.md, tasks.json).

    from kit.envs.library import register
    register()                       # now load_domain("library") works
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from kit import _tau2  # noqa: F401

from tau2.data_model.tasks import Task  # noqa: E402
from tau2.environment.db import DB  # noqa: E402
from tau2.environment.environment import Environment  # noqa: E402
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool  # noqa: E402

HERE = Path(__file__).parent


class Member(BaseModel):
    member_id: str
    name: str
    loans: list[str]
    fines_due: float


class Book(BaseModel):
    book_id: str
    title: str
    copies_available: int


class LibraryDB(DB):
    members: dict[str, Member]
    books: dict[str, Book]


class LibraryTools(ToolKitBase):
    db: LibraryDB

    @is_tool(ToolType.READ)
    def get_member(self, member_id: str) -> Member:
        """Look up a library member.

        Args:
            member_id: The member's id, such as 'm1'.
        """
        if member_id not in self.db.members:
            raise ValueError(f"Member {member_id} not found")
        return self.db.members[member_id]

    @is_tool(ToolType.READ)
    def get_book(self, book_id: str) -> Book:
        """Look up a book and how many copies are available.

        Args:
            book_id: The book's id, such as 'b1'.
        """
        if book_id not in self.db.books:
            raise ValueError(f"Book {book_id} not found")
        return self.db.books[book_id]

    @is_tool(ToolType.WRITE)
    def pay_fines(self, member_id: str) -> Member:
        """Pay all fines a member owes.

        Args:
            member_id: The member's id.
        """
        member = self.get_member(member_id)
        member.fines_due = 0.0
        return member

    @is_tool(ToolType.WRITE)
    def lend_book(self, member_id: str, book_id: str) -> Member:
        """Lend one copy of a book to a member without fines due.

        Args:
            member_id: The member's id.
            book_id: The book's id.
        """
        member = self.get_member(member_id)
        book = self.get_book(book_id)
        if member.fines_due > 0:
            raise ValueError("Member has fines due")
        if book.copies_available < 1:
            raise ValueError("No copy available")
        book.copies_available -= 1
        member.loans.append(book_id)
        return member


def get_environment(db: Optional[LibraryDB] = None, solo_mode: bool = False) -> Environment:
    db = db or LibraryDB.load(str(HERE / "db.json"))
    return Environment(domain_name="library", policy=(HERE / "policy.md").read_text(), tools=LibraryTools(db))


def get_tasks(split: Optional[str] = None) -> list[Task]:
    return [Task.model_validate(t) for t in json.loads((HERE / "tasks.json").read_text())]


def register() -> None:
    from kit.envs import register_domain

    register_domain("library", get_environment, get_tasks)
