"""A real Django project for tests/test_django.py: its settings, tasks and manage.py."""
