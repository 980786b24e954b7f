-- weir 005 down: nothing to undo.
SELECT 1;
