"""Pure readings of text nobody vetted (model replies, request bodies, reports), each linear in the
text's length, so workflow code, the activities and the API server share them; imports no other wing."""
