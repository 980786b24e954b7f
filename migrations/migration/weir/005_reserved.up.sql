-- weir 005: reserved for another change (no schema change here).
SELECT 1;
