"""Long-running worker services; they see only core and get ports through constructors."""
