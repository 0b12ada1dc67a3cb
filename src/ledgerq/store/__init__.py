"""The SQL ledger over SQLAlchemy Core: the only package that imports sqlalchemy."""
