"""What a command changed in its copy (changes, record, store) and applying it back (apply,
apply_check, apply_diff)."""
