"""A domain service's ``ValidationError`` shown on the console form that called it."""
from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError


def errors_onto(form: forms.Form, exc: ValidationError) -> None:
    """Each error on its field when the form has one, else as the form's own error."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)
