"""What every table definition shares: the metadata (with its naming convention) and the
column types that differ per database."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# MySQL/MariaDB DATETIME has no fraction unless asked; all stored times are UTC.
Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# SQLite only auto-increments an INTEGER PRIMARY KEY.
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
